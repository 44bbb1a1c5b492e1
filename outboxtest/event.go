package outboxtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox"
)

// The states of an outbox row (Event.State, Want.State). A row a relay
// holds under a lease is StatePending.
const (
	StatePending   = "pending"
	StatePublished = "published"
	StateDead      = "dead"
)

// Event is an outbox row: the event as written (NotBefore is zero when the
// row is due at once: the writer stores no NotBefore already past when it
// is written), and where the relay is with it.
type Event struct {
	txoutbox.Event

	// Seq is the row's id: events were written in Seq order, and the relay
	// publishes one aggregate's events in that order.
	Seq int64
	// State is StatePending, StatePublished or StateDead.
	State string
	// Attempts counts the failed publishes.
	Attempts int
	// LastError is the last failed publish's error, empty if none.
	LastError string
}

func (e *Event) decode(id, headers string) error {
	var err error
	if e.ID, err = uuid.Parse(id); err != nil {
		return fmt.Errorf("event id %q: %w", id, err)
	}
	if e.State == "claimed" { // schema version 2's claimed rows
		e.State = StatePending
	}
	if err := json.Unmarshal([]byte(headers), &e.Headers); err != nil {
		return fmt.Errorf("headers of event %s: %w", e.ID, err)
	}
	if len(e.Headers) == 0 {
		e.Headers = nil
	}
	return nil
}

// String is the event on one line, as failure messages show it.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s %s %s/%s %s", e.Seq, e.Topic, e.Type, e.AggregateType, e.AggregateID, e.State)
	if !e.NotBefore.IsZero() {
		fmt.Fprintf(&b, " not-before=%s", e.NotBefore.UTC().Format(time.RFC3339Nano))
	}
	if e.Attempts > 0 {
		fmt.Fprintf(&b, " attempts=%d", e.Attempts)
	}
	fmt.Fprintf(&b, " payload=%s", shown(e.Payload))
	if len(e.Headers) > 0 {
		fmt.Fprintf(&b, " headers=%s", showHeaders(e.Headers))
	}
	return b.String()
}

// Want describes an expected event. Each field left zero matches any
// event; Want{} matches every event.
type Want struct {
	Topic         string
	AggregateType string
	AggregateID   string
	Type          string

	// Payload, if not nil, must equal the event's payload as JSON: object
	// keys in any order, any spacing, numbers by their text (1250 is not
	// 1250.0). A json.RawMessage or []byte is taken as JSON text; any
	// other value (a struct, a map, a string) is marshaled first. Use
	// JSON for a literal. For a payload decoded into your own type, take
	// the event RequireEvent returns to Payload.
	Payload any

	// Headers must each be among the event's headers, with that value.
	Headers map[string]string

	// State, if set, must be the event's (StatePending, ...).
	State string
}

// JSON returns s as a Want.Payload taken as JSON text.
func JSON(s string) json.RawMessage { return json.RawMessage(s) }

// String is the Want as failure messages show it: its set fields.
func (w Want) String() string {
	var parts []string
	add := func(name, v string) {
		if v != "" {
			parts = append(parts, fmt.Sprintf("%s: %q", name, v))
		}
	}
	add("Topic", w.Topic)
	add("AggregateType", w.AggregateType)
	add("AggregateID", w.AggregateID)
	add("Type", w.Type)
	if w.Payload != nil {
		if b, err := wantJSON(w.Payload); err == nil {
			parts = append(parts, "Payload: "+shown(b))
		} else {
			parts = append(parts, fmt.Sprintf("Payload: %v", err))
		}
	}
	if len(w.Headers) > 0 {
		parts = append(parts, "Headers: "+showHeaders(w.Headers))
	}
	add("State", w.State)
	if len(parts) == 0 {
		return "{any event}"
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// mismatch returns why e does not match w, or "" if it does.
func (w Want) mismatch(e Event) string {
	var why []string
	field := func(name, want, got string) {
		if want != "" && want != got {
			why = append(why, fmt.Sprintf("%s is %q", name, got))
		}
	}
	field("topic", w.Topic, e.Topic)
	field("type", w.Type, e.Type)
	field("aggregate type", w.AggregateType, e.AggregateType)
	field("aggregate id", w.AggregateID, e.AggregateID)
	field("state", w.State, e.State)
	for _, k := range slices.Sorted(maps.Keys(w.Headers)) {
		got, ok := e.Headers[k]
		switch {
		case !ok:
			why = append(why, fmt.Sprintf("no header %q", k))
		case got != w.Headers[k]:
			why = append(why, fmt.Sprintf("header %q is %q", k, got))
		}
	}
	if w.Payload != nil {
		if msg := payloadMismatch(w.Payload, e.Payload); msg != "" {
			why = append(why, msg)
		}
	}
	return strings.Join(why, ", ")
}

// payloadMismatch compares want, as Want.Payload, with an event's payload.
func payloadMismatch(want any, got []byte) string {
	wb, err := wantJSON(want)
	if err != nil {
		return err.Error()
	}
	wc, err := canonical(wb)
	if err != nil {
		return fmt.Sprintf("the wanted payload is not JSON (%v)", err)
	}
	gc, err := canonical(got)
	if err != nil {
		return "payload is not JSON"
	}
	if !bytes.Equal(wc, gc) {
		return "payload differs"
	}
	return ""
}

// wantJSON is Want.Payload as JSON text.
func wantJSON(v any) ([]byte, error) {
	switch v := v.(type) {
	case json.RawMessage:
		return v, nil
	case []byte:
		return v, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("the wanted payload does not marshal (%v)", err)
	}
	return b, nil
}

// canonical re-encodes JSON text with sorted keys and no spacing, keeping
// numbers as written.
func canonical(b []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("text after the JSON value")
	}
	return json.Marshal(v)
}

// shown is a payload for a message: JSON as is, anything else quoted, cut
// to 300 bytes.
func shown(b []byte) string {
	const most = 300
	s := string(b)
	if !json.Valid(b) {
		s = fmt.Sprintf("%q", b)
	}
	if len(s) > most {
		s = s[:most] + "…"
	}
	return s
}

func showHeaders(h map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(h)) {
		parts = append(parts, fmt.Sprintf("%s=%q", k, h[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}
