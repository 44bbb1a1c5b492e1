package publish

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
)

// CloudEventsSpecVersion is the CloudEvents version of the headers set
// when CloudEvents are on.
const CloudEventsSpecVersion = "1.0"

// CloudEventsSourcePrefix prefixes the default ce_source, before the
// outbox table's name.
const CloudEventsSourcePrefix = "/txoutbox/"

// Message is the message of e: its UUID the event id, its payload the
// event's, its metadata the event's headers and the txoutbox.Header*
// keys (relay.Message documents it for users).
func Message(e *txoutbox.Event) *message.Message {
	msg := message.NewMessage(e.ID.String(), e.Payload)
	for k, v := range e.Headers {
		msg.Metadata.Set(k, v)
	}
	msg.Metadata.Set(txoutbox.HeaderEventID, e.ID.String())
	msg.Metadata.Set(txoutbox.HeaderEventType, e.Type)
	msg.Metadata.Set(txoutbox.HeaderAggregateType, e.AggregateType)
	msg.Metadata.Set(txoutbox.HeaderAggregateID, e.AggregateID)
	msg.Metadata.Set(txoutbox.HeaderCreatedAt, e.CreatedAt.UTC().Format(time.RFC3339Nano))
	msg.Metadata.Set(txoutbox.HeaderContentType, contentType(e))
	return msg
}

// setCloudEvents adds the CloudEvents binary-mode headers of e to msg.
func setCloudEvents(msg *message.Message, e *txoutbox.Event, source string) {
	msg.Metadata.Set("ce_specversion", CloudEventsSpecVersion)
	msg.Metadata.Set("ce_id", e.ID.String())
	msg.Metadata.Set("ce_type", e.Type)
	msg.Metadata.Set("ce_source", source)
	msg.Metadata.Set("ce_time", e.CreatedAt.UTC().Format(time.RFC3339Nano))
	msg.Metadata.Set("content-type", contentType(e))
}

// contentType is e's content type, JSON when the event names none.
func contentType(e *txoutbox.Event) string {
	if e.ContentType == "" {
		return txoutbox.ContentTypeJSON
	}
	return e.ContentType
}
