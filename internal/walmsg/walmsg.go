// Package walmsg is the encoding of table-less events: the content of the
// logical decoding messages (pg_logical_emit_message) that the writer emits
// instead of inserting a row, and that the WAL relay decodes. Both sides
// live in this module's packages, so the format is private to txoutbox and
// versioned by its first field.
package walmsg

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Version is the format version written in every message.
const Version = 1

// Event is one table-less event, the fields of txoutbox.Event.
type Event struct {
	V             int             `json:"v"`
	ID            string          `json:"id"`
	Topic         string          `json:"topic"`
	AggregateType string          `json:"aggregate_type,omitempty"`
	AggregateID   string          `json:"aggregate_id"`
	Type          string          `json:"type"`
	ContentType   string          `json:"content_type,omitempty"`
	Payload       []byte          `json:"payload"`
	Headers       json.RawMessage `json:"headers,omitempty"` // a JSON object of strings, as the headers column holds
	CreatedAt     time.Time       `json:"created_at"`
}

// ErrFormat is matched by Decode's errors.
var ErrFormat = errors.New("walmsg: not a txoutbox event message")

// Encode returns e's message content.
func Encode(e Event) ([]byte, error) {
	e.V = Version
	return json.Marshal(e)
}

// Decode parses a message content written by Encode.
func Decode(b []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if e.V != Version {
		return Event{}, fmt.Errorf("%w: version %d, want %d", ErrFormat, e.V, Version)
	}
	return e, nil
}
