package relay

import "github.com/txoutbox/txoutbox/relay/internal/publish"

// CloudEventsSpecVersion is the CloudEvents version of the headers the relay
// sets.
const CloudEventsSpecVersion = publish.CloudEventsSpecVersion

// CloudEventsSourcePrefix prefixes the default ce_source: the outbox table
// the event came from, e.g. "/txoutbox/public.outbox".
const CloudEventsSourcePrefix = publish.CloudEventsSourcePrefix

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
// id. The WAL relay (walrelay.Config.CloudEvents) sets the same headers.
type CloudEventsConfig struct {
	// Enabled turns the headers on.
	Enabled bool

	// Source is ce_source, a URI reference naming the producer. Default:
	// CloudEventsSourcePrefix and the outbox table.
	Source string
}
