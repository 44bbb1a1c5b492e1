package relay

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// LargePayloads stores the payloads of events whose records would be too
// large for the broker, for a claim check: the relay publishes the
// reference it returns instead. Package claimcheck
// (github.com/txoutbox/txoutbox/claimcheck, a module of its own)
// implements it over object storage.
type LargePayloads interface {
	// Offload stores msg's payload and returns the message to publish in
	// its place: same UUID, key and metadata, plus what names the stored
	// object. The object's key must depend only on table and the event id
	// (msg's UUID), so that a retry, a duplicate, another relay or a
	// replay write the same object, and the payload must be stored before
	// it returns: the relay publishes the reference next. An error is
	// taken for an outage of the store (see Permanent), never the event's
	// fault: the event is retried, with backoff, and does not go dead.
	// msg's context is ctx. It is called by many lanes at once.
	Offload(ctx context.Context, table txoutbox.Table, msg *message.Message) (*message.Message, error)
}

// A LargePayloads is what the publish core offloads through.
var _ publish.LargePayloads = LargePayloads(nil)

// Claim check defaults and floors (see LargePayloadsConfig.Over).
const (
	// LargePayloadsOverDefault is the threshold with a publisher that does
	// not report its largest record: 768 KiB, three quarters of Kafka's
	// default max.message.bytes and under NATS's default max_payload.
	LargePayloadsOverDefault = publish.LargePayloadsOverDefault
	// LargePayloadsOverFloor: a reference record carries the event's
	// headers and the claim check's, a few hundred bytes; below a KiB
	// nearly every event would be offloaded.
	LargePayloadsOverFloor = publish.LargePayloadsOverFloor
)

// LargePayloadsConfig turns on a claim check: an event whose record would
// be larger than Over is published as a small reference record instead
// (same key, event id, headers and CloudEvents attributes), its payload
// stored first by Store. Events under Over are published unchanged.
// docs/large-payloads.md describes it; package claimcheck gives the store
// and the consumers' middleware. The WAL relay
// (walrelay.Config.LargePayloads) does the same.
type LargePayloadsConfig struct {
	// Store stores the payloads. Nil turns the claim check off.
	Store LargePayloads

	// Over is the threshold, in bytes of the encoded record (payload,
	// key, headers and framing). Default: three quarters of the largest
	// record the publisher reports, through a method MaxRecordBytes() int
	// (kafkapub.Publisher's, from its Config.MaxMessageBytes), else
	// LargePayloadsOverDefault. At least LargePayloadsOverFloor (1 KiB);
	// New refuses an Over that is not under the publisher's largest
	// record. Keep it under the topics' max.message.bytes too.
	Over int
}

// Validate reports whether c is a configuration the relay modes accept
// before they know their publisher: Over is zero or at least its floor.
// Each mode's Config.Validate includes it.
func (c LargePayloadsConfig) Validate() error {
	if c.Over != 0 && c.Over < LargePayloadsOverFloor {
		return fmt.Errorf("LargePayloads.Over %d is below its floor %d", c.Over, LargePayloadsOverFloor)
	}
	return nil
}
