package relay

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// BatchPublisher is a message.Publisher that can also publish several
// messages at once and report each one's outcome. The relay uses it when
// its publisher has it (kafkapub.Publisher does): each lane then hands the
// publisher the events queued behind one another, up to
// Config.LaneBatch, in one call, so a broker request carries many events
// of each lane instead of one. A publisher without it gets one event per
// Publish call, as before.
//
// A batch never holds two events of one aggregate: an event is sent only
// once the outcome of its aggregate's previous event is known, whatever
// the publisher does with the messages of one call.
type BatchPublisher interface {
	message.Publisher

	// PublishBatch publishes msgs[i] to topics[i] (the slices are as long
	// as each other) and returns once every message was acknowledged or
	// failed. It returns nil when all were acknowledged, and otherwise a
	// slice as long as msgs whose element i is the error of msgs[i], nil
	// for those acknowledged.
	PublishBatch(topics []string, msgs []*message.Message) []error
}

// A BatchPublisher is what the publish core batches through.
var _ publish.BatchPublisher = BatchPublisher(nil)
