package relay

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"
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

// publishBatch sends rows, of distinct aggregates, and returns each one's
// error (nil when all were acknowledged), with the spans and metrics of
// publish.
func (r *Relay) publishBatch(ctx context.Context, bp BatchPublisher, rows []*claimedRow) []error {
	topics := make([]string, len(rows))
	msgs := make([]*message.Message, len(rows))
	var spans []trace.Span
	t := r.trace
	if _, ok := t.(globalTracer); ok {
		t = currentGlobalTracer()
	}
	if t != nil {
		spans = make([]trace.Span, len(rows))
	}
	for i, row := range rows {
		topics[i] = row.event.Topic
		msgs[i] = r.message(row.event)
		if t == nil {
			msgs[i].SetContext(ctx)
			continue
		}
		var spanCtx context.Context
		spanCtx, spans[i] = r.startSpan(ctx, t, row.event)
		msgs[i].SetContext(spanCtx)
	}
	start := time.Now()
	errs := slices.Clone(bp.PublishBatch(topics, msgs)) // ours to rewrite
	took := time.Since(start)
	if errs != nil && len(errs) != len(rows) {
		// A publisher breaking the contract: count every message as
		// failed, which at worst publishes some twice.
		err := fmt.Errorf("publisher returned %d outcomes for %d messages", len(errs), len(rows))
		errs = make([]error, len(rows))
		for i := range errs {
			errs[i] = err
		}
	}
	for i, row := range rows {
		var err error
		if errs != nil && errs[i] != nil {
			err = fmt.Errorf("publish event %s to %s: %w", row.event.ID, row.event.Topic, errs[i])
			errs[i] = err
		}
		if spans != nil {
			endSpan(spans[i], err)
		}
		r.met.recordSend(ctx, row.event.Topic, took, err)
	}
	return errs
}
