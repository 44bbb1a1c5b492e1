package txoutbox

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// ContentTypeJSON is the default content type of an event payload. Payloads
// of this type are checked to be valid JSON when they are written.
const ContentTypeJSON = "application/json"

// Event is one domain event, written to the outbox in the same transaction
// as the business change it describes and later published by the relay.
//
// The relay publishes Payload as the message body, AggregateID as the Kafka
// message key and ID as the Watermill message UUID, so consumers can
// deduplicate on it.
type Event struct {
	// ID identifies the event for its whole life: it is the deduplication
	// key consumers use. Leave it zero and the Writer assigns a time-ordered
	// UUID (version 7) when the event is written. It never changes after.
	ID uuid.UUID

	// Topic is the destination topic. It must be a name Kafka accepts:
	// 1 to 249 bytes of [a-zA-Z0-9._-], and not "." or "..".
	Topic string

	// AggregateType names the kind of entity the event is about, e.g.
	// "order". It is optional and carried as a header.
	AggregateType string

	// AggregateID identifies the entity, e.g. the order's primary key. It
	// is the message key, so events of one aggregate land on one Kafka
	// partition, and the relay publishes them in the order they were
	// written. Required.
	AggregateID string

	// Type names what happened, e.g. "order.placed". Required.
	Type string

	// ContentType describes Payload. Empty means ContentTypeJSON.
	ContentType string

	// Payload is the message body, stored and published byte for byte.
	Payload []byte

	// Headers are published as message metadata (Kafka headers). Names
	// must not be empty.
	Headers map[string]string

	// CreatedAt is when the event happened. Zero means the time it is
	// written.
	CreatedAt time.Time

	// NotBefore delays the event: the relay publishes it no earlier than
	// this time by the database clock, within its PollInterval (1s by
	// default), e.g. a reminder 24 hours after the order it is written
	// with. Zero, or a time already past when the event is written (by
	// the database's clock when the insert runs, however long its
	// transaction has been open), means at once, in every mode. It must
	// lie within MaxNotBeforeAge before and MaxNotBeforeDelay after the
	// writer's clock. The events of an aggregate are still published in
	// the order they were written: a delayed event holds back the later
	// events of its aggregate until it is published (give it an aggregate
	// id of its own to let them pass). The polling relay honours it; a
	// Writer with WALMessages and a table streamed by the WAL relay refuse
	// one more than MaxNotBeforeSkew ahead (see ErrNotBeforeStreamed).
	NotBefore time.Time
}

// NewEvent returns an event whose payload is v marshaled as JSON, with its
// ID already assigned (a new UUIDv7), so the caller can log or return it.
// Validation happens when the event is written.
func NewEvent(topic, aggregateType, aggregateID, eventType string, v any) (Event, error) {
	payload, err := json.Marshal(v)
	if err != nil {
		return Event{}, fmt.Errorf("marshal %s payload: %w", eventType, err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Event{}, fmt.Errorf("generate event id: %w", err)
	}
	return Event{
		ID:            id,
		Topic:         topic,
		AggregateType: aggregateType,
		AggregateID:   aggregateID,
		Type:          eventType,
		ContentType:   ContentTypeJSON,
		Payload:       payload,
	}, nil
}

// contentType returns the effective content type.
func (e *Event) contentType() string {
	if e.ContentType == "" {
		return ContentTypeJSON
	}
	return e.ContentType
}
