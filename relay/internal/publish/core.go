package publish

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txoutbox/txoutbox"
)

// BatchPublisher is relay.BatchPublisher, whose documentation is the
// contract; declared here too because the relay package imports this one.
// A relay.BatchPublisher is one of these.
type BatchPublisher interface {
	message.Publisher
	PublishBatch(topics []string, msgs []*message.Message) []error
}

// Config configures a Core. Publisher and Scope are required; the other
// fields are the relay's options of those names.
type Config struct {
	// Scope is the instrumentation scope of the spans and instruments:
	// the import path of the mode's package.
	Scope string

	// Publisher publishes the messages.
	Publisher message.Publisher

	// LaneBatch is the most events one call hands a BatchPublisher; with
	// 1, or a publisher that is not one, events go one per Publish.
	LaneBatch int

	// Table is the outbox table, named in the default ce_source and, as
	// TableAttribute, on every measurement and span.
	Table txoutbox.Table

	// CloudEvents adds the CloudEvents binary-mode headers; Source is
	// their ce_source (default: CloudEventsSourcePrefix and Table).
	CloudEvents       bool
	CloudEventsSource string

	MeterProvider   metric.MeterProvider          // default: the global provider
	TracerProvider  trace.TracerProvider          // default: the global provider, at each publish
	Propagator      propagation.TextMapPropagator // default: the global propagator, or W3C trace context
	MessagingSystem string                        // default: known from Publisher

	// LargePayloads, when not nil, stores the payload of a message whose
	// record would be larger than LargePayloadsOver bytes (0: see
	// LargePayloadsOver), and the reference it returns is published
	// instead.
	LargePayloads     LargePayloads
	LargePayloadsOver int
}

// Core publishes events for one relay. It is safe for concurrent use by
// the relay's lanes.
type Core struct {
	pub        message.Publisher
	batch      BatchPublisher // nil: one event per Publish
	limit      int            // the most events one call sends
	ceSource   string         // "" while CloudEvents are off
	trace      *tracing
	propagator propagation.TextMapPropagator
	system     string // messaging.system
	table      string // TableAttribute's value
	met        *instruments
	large      LargePayloads // nil: no claim check
	over       int           // the claim check's threshold
	tableCfg   txoutbox.Table
}

// New returns the core of cfg, its instruments made on cfg.MeterProvider.
func New(cfg Config) (*Core, error) {
	if cfg.Publisher == nil {
		return nil, errors.New("publish: Publisher is nil")
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	table := TableValue(cfg.Table)
	met, err := newInstruments(mp.Meter(cfg.Scope), table)
	if err != nil {
		return nil, err
	}
	c := &Core{pub: cfg.Publisher, limit: 1, trace: newTracing(cfg.TracerProvider, cfg.Scope), propagator: cfg.Propagator,
		system: messagingSystem(cfg.MessagingSystem, cfg.Publisher), table: table, met: met, tableCfg: cfg.Table}
	if cfg.LargePayloads != nil {
		c.large, c.over = cfg.LargePayloads, cfg.LargePayloadsOver
		if c.over == 0 { // the relays pass the threshold they validated
			if c.over, err = LargePayloadsOver(0, cfg.Publisher); err != nil {
				return nil, err
			}
		}
	}
	if bp, ok := cfg.Publisher.(BatchPublisher); ok && cfg.LaneBatch > 1 {
		c.batch, c.limit = bp, cfg.LaneBatch
	}
	if cfg.CloudEvents {
		c.ceSource = cfg.CloudEventsSource
		if c.ceSource == "" {
			c.ceSource = CloudEventsSourcePrefix + cfg.Table.String()
		}
	}
	return c, nil
}

// Limit is the most events one Send hands the publisher at once: a lane
// gathers up to that many, of distinct aggregates.
func (c *Core) Limit() int { return c.limit }

// Message is the message the relay publishes for e: Message, with the
// CloudEvents headers when configured.
func (c *Core) Message(e *txoutbox.Event) *message.Message {
	msg := Message(e)
	if c.ceSource != "" {
		setCloudEvents(msg, e, c.ceSource)
	}
	return msg
}

// Send publishes events, of distinct aggregates, and returns once the
// broker acknowledged or refused each: nil when all were acknowledged,
// else a slice as long as events holding each one's error, wrapped with
// its id and topic. Several go in one PublishBatch call when the publisher
// batches, else each in a Publish call of its own, one after another.
// Each publish gets a producer span (with tracing on) and is recorded in
// the publish-duration histogram and the sent-messages counter.
func (c *Core) Send(ctx context.Context, events []*txoutbox.Event) []error {
	if c.batch != nil && len(events) > 1 {
		return c.sendBatch(ctx, events)
	}
	var errs []error
	for i, e := range events {
		if err := c.publish(ctx, e); err != nil {
			if errs == nil {
				errs = make([]error, len(events))
			}
			errs[i] = err
		}
	}
	return errs
}

// publish sends one event and returns once the broker acknowledged it.
// Without tracing no tracing work is done per event.
func (c *Core) publish(ctx context.Context, e *txoutbox.Event) error {
	start := time.Now()
	msg, err := c.offload(ctx, e, c.Message(e))
	if err != nil {
		err = wrap(e, err)
		c.met.record(ctx, e.Topic, time.Since(start), err)
		return err
	}
	var span trace.Span
	if t := c.trace.tracer(); t != nil {
		var spanCtx context.Context
		spanCtx, span = c.startSpan(ctx, t, e)
		msg.SetContext(spanCtx)
	} else {
		msg.SetContext(ctx)
	}
	err = wrap(e, c.pub.Publish(e.Topic, msg))
	if span != nil {
		endSpan(span, err)
	}
	c.met.record(ctx, e.Topic, time.Since(start), err)
	return err
}

// sendBatch sends events in one PublishBatch call, those whose payload
// the claim check (if any) stored as references.
func (c *Core) sendBatch(ctx context.Context, events []*txoutbox.Event) []error {
	// An event whose payload the claim check could not store fails alone;
	// the others go out. They are of distinct aggregates, so none waits
	// on it.
	var failed []error
	if c.large != nil {
		msgs := make([]*message.Message, 0, len(events))
		sent := make([]*txoutbox.Event, 0, len(events))
		for i, e := range events {
			start := time.Now()
			msg, err := c.offload(ctx, e, c.Message(e))
			if err != nil {
				if failed == nil {
					failed = make([]error, len(events))
				}
				failed[i] = wrap(e, err)
				c.met.record(ctx, e.Topic, time.Since(start), failed[i])
				continue
			}
			msgs = append(msgs, msg)
			sent = append(sent, e)
		}
		if failed == nil {
			return c.sendMessages(ctx, events, msgs)
		}
		if len(sent) == 0 {
			return failed
		}
		errs := c.sendMessages(ctx, sent, msgs)
		j := 0
		for i := range events {
			if failed[i] != nil {
				continue
			}
			if errs != nil {
				failed[i] = errs[j]
			}
			j++
		}
		return failed
	}
	msgs := make([]*message.Message, len(events))
	for i, e := range events {
		msgs[i] = c.Message(e)
	}
	return c.sendMessages(ctx, events, msgs)
}

// sendMessages sends msgs, the messages of events, in one PublishBatch
// call.
func (c *Core) sendMessages(ctx context.Context, events []*txoutbox.Event, msgs []*message.Message) []error {
	topics := make([]string, len(events))
	var spans []trace.Span
	t := c.trace.tracer()
	if t != nil {
		spans = make([]trace.Span, len(events))
	}
	for i, e := range events {
		topics[i] = e.Topic
		if t == nil {
			msgs[i].SetContext(ctx)
			continue
		}
		var spanCtx context.Context
		spanCtx, spans[i] = c.startSpan(ctx, t, e)
		msgs[i].SetContext(spanCtx)
	}
	start := time.Now()
	errs := slices.Clone(c.batch.PublishBatch(topics, msgs)) // ours to rewrite
	took := time.Since(start)
	if errs != nil && len(errs) != len(events) {
		// A publisher breaking the contract: count every message as
		// failed, which at worst publishes some twice.
		err := fmt.Errorf("publisher returned %d outcomes for %d messages", len(errs), len(events))
		errs = make([]error, len(events))
		for i := range errs {
			errs[i] = err
		}
	}
	for i, e := range events {
		var err error
		if errs != nil {
			err = wrap(e, errs[i])
			errs[i] = err
		}
		if spans != nil {
			endSpan(spans[i], err)
		}
		c.met.record(ctx, e.Topic, took, err)
	}
	return errs
}

// wrap names e in a publish error; nil stays nil.
func wrap(e *txoutbox.Event, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("publish event %s to %s: %w", e.ID, e.Topic, err)
}
