package txoutbox

// Wire header keys: the metadata the relay sets on every message besides an
// event's own headers (through watermill-kafka, Kafka record headers), and
// that consumers read, such as package inbox's event id. Events must not
// set headers under these names: the relay's values win.
const (
	HeaderEventID       = "event_id"       // Event.ID, also the Watermill message UUID
	HeaderEventType     = "event_type"     // Event.Type
	HeaderAggregateType = "aggregate_type" // Event.AggregateType
	HeaderAggregateID   = "aggregate_id"   // Event.AggregateID, also the Kafka key
	HeaderCreatedAt     = "created_at"     // Event.CreatedAt, RFC 3339 with nanoseconds
	HeaderContentType   = "content_type"   // Event.ContentType
)
