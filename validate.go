package txoutbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrInvalidEvent is matched (with errors.Is) by every error that rejects an
// event at write time. The concrete error is a *ValidationError naming the
// field.
var ErrInvalidEvent = errors.New("txoutbox: invalid event")

// MaxPayloadBytesDefault is the default limit on an event's size: its
// payload plus aggregate id, type, aggregate type and headers. It is Kafka's
// default message size (1 MiB) less 8 KiB kept for the metadata the relay
// adds and the record's framing, so an event the writer accepts is one the
// broker accepts: an oversize event fails the business transaction instead
// of going dead in the relay.
const MaxPayloadBytesDefault = 1<<20 - 8<<10

// maxTopicLen is Kafka's topic name limit.
const maxTopicLen = 249

// MaxAggregateIDBytes is the longest aggregate id an event may have. The
// outbox indexes unpublished and dead rows by aggregate id (schema version
// 5), and a B-tree entry must fit a third of a page (about 2.7 KB): a
// longer id would fail the insert, in the middle of the business
// transaction, with an index error. A Kafka key is rarely near it.
const MaxAggregateIDBytes = 1024

// MaxNotBeforeDelay is how far ahead of the writer's clock an event's
// NotBefore may lie: a year and a day, so a yearly reminder fits. Further
// ahead is taken for a mistake (a unit error, a time in the wrong year) and
// refused, rather than kept unpublished, holding back its aggregate, for
// years.
const MaxNotBeforeDelay = 366 * 24 * time.Hour

// MaxNotBeforeAge is how far behind the writer's clock an event's NotBefore
// may lie. A NotBefore already past means at once (an expiry written after
// it expired), but one this old is taken for a mistake, such as a zero
// Unix time or a date parsed wrongly, and refused.
const MaxNotBeforeAge = 7 * 24 * time.Hour

// MaxNotBeforeSkew is how far ahead of the clock that judges it an event's
// NotBefore may lie on an outbox the WAL relay streams, which publishes at
// commit, and still be written (and published at commit, up to this much
// early) rather than refused with ErrNotBeforeStreamed. It absorbs the
// skew between the writer's clock and the database's: a NotBefore of
// time.Now() from a host whose clock runs a little ahead of the
// database's is due, not delayed. The clock is the database's statement
// clock for a row (schema version 12's trigger), the writer's for a
// Writer with WALMessages, which writes no row. The polling relay needs no
// slack: it publishes no earlier than NotBefore by the database clock.
const MaxNotBeforeSkew = time.Second

// ValidationError says which field of which event was rejected and why.
type ValidationError struct {
	Index  int    // position of the event in the written batch
	Field  string // e.g. "Topic", "Payload", "Headers"
	Reason string
}

// Error implements error.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("txoutbox: invalid event %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidEvent) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidEvent }

// Validate checks e against the rules the Writer applies, with the default
// payload limit. The Writer validates every event itself; call this to
// reject bad input early, e.g. before opening a transaction.
func (e *Event) Validate() error {
	return e.validate(0, MaxPayloadBytesDefault, time.Now())
}

// validate checks the event as the index-th of a batch written at now.
func (e *Event) validate(index, maxPayload int, now time.Time) error {
	bad := func(field, format string, args ...any) error {
		return &ValidationError{Index: index, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if reason := topicProblem(e.Topic); reason != "" {
		return bad("Topic", "%s", reason)
	}
	if e.Type == "" {
		return bad("Type", "empty")
	}
	if e.AggregateID == "" {
		return bad("AggregateID", "empty")
	}
	if len(e.AggregateID) > MaxAggregateIDBytes {
		return bad("AggregateID", "%d bytes is longer than the limit of %d", len(e.AggregateID), MaxAggregateIDBytes)
	}
	if size := e.size(); size > maxPayload {
		return bad("Payload", "the event is %d bytes (payload %d, plus aggregate id, type and headers), over the limit of %d",
			size, len(e.Payload), maxPayload)
	}
	if isJSON(e.contentType()) && !json.Valid(e.Payload) {
		return bad("Payload", "not valid JSON (content type %s)", e.contentType())
	}
	for name := range e.Headers {
		if name == "" {
			return bad("Headers", "a header name is empty")
		}
	}
	if !e.NotBefore.IsZero() {
		if d := e.NotBefore.Sub(now); d > MaxNotBeforeDelay {
			return bad("NotBefore", "%s is %s ahead, beyond MaxNotBeforeDelay (%s)",
				e.NotBefore.Format(time.RFC3339), d.Round(time.Second), MaxNotBeforeDelay)
		}
		if d := now.Sub(e.NotBefore); d > MaxNotBeforeAge {
			return bad("NotBefore", "%s is %s in the past, beyond MaxNotBeforeAge (%s): leave it zero to publish at once",
				e.NotBefore.Format(time.RFC3339), d.Round(time.Second), MaxNotBeforeAge)
		}
	}
	return nil
}

// size is what the event adds to the message the broker receives.
func (e *Event) size() int {
	n := len(e.Payload) + len(e.AggregateID) + len(e.Type) + len(e.AggregateType) + len(e.ContentType)
	for k, v := range e.Headers {
		n += len(k) + len(v)
	}
	return n
}

// isJSON reports whether a content type declares JSON, ignoring parameters
// such as charset and structured suffixes such as application/cloudevents+json.
func isJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// topicProblem returns why Kafka would refuse the topic name, or "".
func topicProblem(topic string) string {
	switch {
	case topic == "":
		return "empty"
	case len(topic) > maxTopicLen:
		return fmt.Sprintf("%d bytes is longer than Kafka's limit of %d", len(topic), maxTopicLen)
	case topic == "." || topic == "..":
		return fmt.Sprintf("%q is not a valid Kafka topic", topic)
	}
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("%q has characters outside [a-zA-Z0-9._-]", topic)
		}
	}
	return ""
}
