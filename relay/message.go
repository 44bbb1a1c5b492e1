package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/txoutbox/txoutbox"
)

// Metadata keys the relay sets on every message, besides the event's own
// headers. Through watermill-kafka they become Kafka record headers.
const (
	MetadataEventID       = "event_id"
	MetadataEventType     = "event_type"
	MetadataAggregateType = "aggregate_type"
	MetadataAggregateID   = "aggregate_id"
	MetadataCreatedAt     = "created_at" // RFC 3339 with nanoseconds
	MetadataContentType   = "content_type"
)

// propagator carries W3C trace context between event headers and message
// metadata.
var propagator = propagation.TraceContext{}

// tracer returns the relay's tracer, or nil when no provider is configured
// (the default), which turns per-event tracing off entirely.
func tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		return nil
	}
	return tp.Tracer("github.com/txoutbox/txoutbox/relay")
}

// Message converts an event to the Watermill message the relay publishes:
// the message UUID is the event id, the payload the event payload, and the
// metadata the event's headers plus the Metadata* keys. Use it to publish
// events the same way from elsewhere (e.g. replays).
func Message(e txoutbox.Event) *message.Message {
	msg := message.NewMessage(e.ID.String(), e.Payload)
	for k, v := range e.Headers {
		msg.Metadata.Set(k, v)
	}
	msg.Metadata.Set(MetadataEventID, e.ID.String())
	msg.Metadata.Set(MetadataEventType, e.Type)
	msg.Metadata.Set(MetadataAggregateType, e.AggregateType)
	msg.Metadata.Set(MetadataAggregateID, e.AggregateID)
	msg.Metadata.Set(MetadataCreatedAt, e.CreatedAt.UTC().Format(time.RFC3339Nano))
	ct := e.ContentType
	if ct == "" {
		ct = txoutbox.ContentTypeJSON
	}
	msg.Metadata.Set(MetadataContentType, ct)
	return msg
}

// publish sends one row and returns once the broker acknowledged it. With a
// TracerProvider configured, the publish span is linked to the span that
// wrote the event (its traceparent header) and its own context replaces
// traceparent in the message, so a consumer continues the trace from the
// publish. Without one, the writer's traceparent travels as it is and no
// tracing work is done per event.
func (r *Relay) publish(ctx context.Context, row *claimedRow) error {
	e := row.event
	msg := Message(e)
	if r.trace == nil {
		msg.SetContext(ctx)
		return r.send(e, msg)
	}

	written := trace.SpanContextFromContext(propagator.Extract(context.Background(), propagation.MapCarrier(e.Headers)))
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", e.Topic),
			attribute.String("messaging.message.id", e.ID.String()),
			attribute.String("messaging.kafka.message.key", e.AggregateID),
		),
	}
	if written.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: written}))
	}
	spanCtx, span := r.trace.Start(ctx, "send "+e.Topic, opts...)
	defer span.End()
	if span.SpanContext().IsValid() {
		propagator.Inject(spanCtx, propagation.MapCarrier(msg.Metadata))
	}
	msg.SetContext(spanCtx)
	err := r.send(e, msg)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

func (r *Relay) send(e txoutbox.Event, msg *message.Message) error {
	if err := r.pub.Publish(e.Topic, msg); err != nil {
		return fmt.Errorf("publish event %s to %s: %w", e.ID, e.Topic, err)
	}
	return nil
}
