package publish

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
)

// LargePayloads is relay.LargePayloads, whose documentation is the
// contract; declared here too because the relay package imports this one.
type LargePayloads interface {
	Offload(ctx context.Context, table txoutbox.Table, msg *message.Message) (*message.Message, error)
}

// RecordLimiter is what a publisher that knows the largest record it sends
// has (kafkapub.Publisher does): the default threshold of the claim check
// is taken from it.
type RecordLimiter interface {
	MaxRecordBytes() int
}

// LargePayloadsOverDefault is the claim check's threshold with a publisher
// that does not report its largest record: three quarters of Kafka's
// default max.message.bytes, and under NATS's default max_payload (1 MiB).
const LargePayloadsOverDefault = 768 << 10

// LargePayloadsOverFloor is the least threshold: the reference record a
// claim check publishes carries the event's headers and its own, a few
// hundred bytes; a lower threshold would offload nearly every event.
const LargePayloadsOverFloor = 1024

// recordOverhead bounds what a record adds to its key, value and header
// bytes: Kafka's record batch header (61 bytes) and each record's varint
// lengths, attributes and deltas, a few bytes per header.
const recordOverhead = 128

// LargePayloadsOver returns the threshold the claim check uses with pub:
// over when set, else three quarters of the largest record pub reports,
// else LargePayloadsOverDefault. An over above what pub reports is
// refused: events between the two would be neither offloaded nor
// accepted by the broker.
func LargePayloadsOver(over int, pub message.Publisher) (int, error) {
	limit := 0
	if l, ok := pub.(RecordLimiter); ok {
		limit = l.MaxRecordBytes()
	}
	switch {
	case over == 0 && limit > 0:
		return limit / 4 * 3, nil
	case over == 0:
		return LargePayloadsOverDefault, nil
	case limit > 0 && over > limit-recordOverhead:
		return 0, fmt.Errorf("LargePayloads.Over %d is not under the publisher's largest record (%d bytes, less %d for the record's framing): events in between would be refused by the broker",
			over, limit, recordOverhead)
	}
	return over, nil
}

// RecordSize is about the size of msg's record on the broker: its
// payload, key (the aggregate id) and metadata, plus the framing. It
// errs on the large side, as a threshold under the broker's limit needs.
func RecordSize(msg *message.Message) int {
	n := len(msg.Payload) + len(msg.Metadata.Get(txoutbox.HeaderAggregateID)) + recordOverhead
	for k, v := range msg.Metadata {
		n += len(k) + len(v) + 4
	}
	return n
}

// offload replaces msg by a reference to its payload, stored by the
// claim check, when its record would pass the threshold; otherwise, or
// with no claim check, it returns msg. A store failure is an outage, not
// the event's fault: the error is not marked permanent, so the event is
// retried for as long as it lasts and never goes dead for it.
func (c *Core) offload(ctx context.Context, e *txoutbox.Event, msg *message.Message) (*message.Message, error) {
	if c.large == nil {
		return msg, nil
	}
	size := RecordSize(msg)
	if size <= c.over {
		return msg, nil
	}
	msg.SetContext(ctx)
	ref, err := c.large.Offload(ctx, c.tableCfg, msg)
	if err != nil {
		return nil, fmt.Errorf("claim check: store the payload of event %s (a record of about %d bytes, over %d): %w", e.ID, size, c.over, err)
	}
	if ref == nil {
		return nil, fmt.Errorf("claim check: store the payload of event %s: the store returned no message", e.ID)
	}
	return ref, nil
}
