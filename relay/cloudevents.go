package relay

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
)

// CloudEventsSpecVersion is the CloudEvents version of the headers the relay
// sets.
const CloudEventsSpecVersion = "1.0"

// CloudEventsSourcePrefix prefixes the default ce_source: the outbox table
// the event came from, e.g. "/txoutbox/public.outbox".
const CloudEventsSourcePrefix = "/txoutbox/"

// CloudEventsConfig adds the headers of the CloudEvents Kafka protocol
// binding in binary mode, beside the relay's own, so consumers built on a
// CloudEvents SDK read the events without a custom decoder:
//
//	ce_specversion  1.0
//	ce_id           the event id
//	ce_type         the event type
//	ce_source       Source
//	ce_time         the event's creation time, RFC 3339
//	content-type    the event's content type
//
// The message value stays the event's payload and the key its aggregate
// id.
type CloudEventsConfig struct {
	// Enabled turns the headers on.
	Enabled bool

	// Source is ce_source, a URI reference naming the producer. Default:
	// CloudEventsSourcePrefix and the outbox table.
	Source string
}

// set adds the CloudEvents headers for e to msg.
func (c CloudEventsConfig) set(msg *message.Message, e txoutbox.Event, table txoutbox.Table) {
	source := c.Source
	if source == "" {
		source = CloudEventsSourcePrefix + table.String()
	}
	ct := e.ContentType
	if ct == "" {
		ct = txoutbox.ContentTypeJSON
	}
	msg.Metadata.Set("ce_specversion", CloudEventsSpecVersion)
	msg.Metadata.Set("ce_id", e.ID.String())
	msg.Metadata.Set("ce_type", e.Type)
	msg.Metadata.Set("ce_source", source)
	msg.Metadata.Set("ce_time", e.CreatedAt.UTC().Format(time.RFC3339Nano))
	msg.Metadata.Set("content-type", ct)
}

// Set adds the CloudEvents headers for e, an event of table, to msg: what
// the relay does to every message when Enabled. Other publish paths (the
// WAL relay) call it to send the identical message.
func (c CloudEventsConfig) Set(msg *message.Message, e txoutbox.Event, table txoutbox.Table) {
	c.set(msg, e, table)
}
