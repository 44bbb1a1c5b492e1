package relay

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/txoutbox/txoutbox"
)

// tracer returns the relay's tracer for tp, or nil when tp does no tracing:
// a no-op provider, or the global provider while no application has set one.
// With nil the relay skips per-event tracing work entirely. A nil tp (the
// Config default) means the global provider, looked up at each publish so a
// provider set after New is used.
func tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return globalTracer{}
	}
	if _, ok := tp.(noop.TracerProvider); ok || isUnsetGlobal(tp) {
		return nil
	}
	return tp.Tracer(instrumentationName)
}

// instrumentationName names the relay's tracer and meter.
const instrumentationName = "github.com/txoutbox/txoutbox/relay"

// globalTracer stands for "the global TracerProvider, whatever it is at the
// time"; publish resolves it with currentGlobalTracer.
type globalTracer struct{ trace.Tracer }

// cachedTracer is the tracer of the global provider last seen.
type cachedTracer struct {
	tp trace.TracerProvider
	t  trace.Tracer
}

var globalTracerCache atomic.Pointer[cachedTracer]

// currentGlobalTracer returns the global provider's tracer, or nil while
// it does no tracing. It costs an atomic load and a comparison per event.
func currentGlobalTracer() trace.Tracer {
	tp := otel.GetTracerProvider()
	if !reflect.TypeOf(tp).Comparable() {
		return tracer(tp)
	}
	if c := globalTracerCache.Load(); c != nil && c.tp == tp {
		return c.t
	}
	t := tracer(tp)
	globalTracerCache.Store(&cachedTracer{tp: tp, t: t})
	return t
}

// isUnsetGlobal reports whether tp is OpenTelemetry's global placeholder,
// which only delegates to a provider set later: nothing is recorded through
// it until then.
func isUnsetGlobal(v any) bool {
	t := reflect.TypeOf(v)
	return t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global"
}

// textPropagator returns p, or else the global propagator, or else W3C
// trace context when no application set a global one (the placeholder
// propagates nothing): the writer's default, so the two agree.
func textPropagator(p propagation.TextMapPropagator) propagation.TextMapPropagator {
	if p != nil {
		return p
	}
	if g := otel.GetTextMapPropagator(); len(g.Fields()) > 0 {
		return g
	}
	return propagation.TraceContext{}
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
	msg.Metadata.Set(txoutbox.HeaderEventID, e.ID.String())
	msg.Metadata.Set(txoutbox.HeaderEventType, e.Type)
	msg.Metadata.Set(txoutbox.HeaderAggregateType, e.AggregateType)
	msg.Metadata.Set(txoutbox.HeaderAggregateID, e.AggregateID)
	msg.Metadata.Set(txoutbox.HeaderCreatedAt, e.CreatedAt.UTC().Format(time.RFC3339Nano))
	ct := e.ContentType
	if ct == "" {
		ct = txoutbox.ContentTypeJSON
	}
	msg.Metadata.Set(txoutbox.HeaderContentType, ct)
	return msg
}

// publish sends one row and returns once the broker acknowledged it. With
// tracing on, a producer span "send <topic>" following the messaging
// semantic conventions covers the send and is linked to the span that
// wrote the event, whose trace context (the creation context, in the
// event's headers) travels to consumers unchanged. Without tracing no
// tracing work is done per event.
func (r *Relay) publish(ctx context.Context, row *claimedRow) error {
	e := row.event
	msg := r.message(e)
	t := r.trace
	if _, ok := t.(globalTracer); ok {
		t = currentGlobalTracer()
	}
	start := time.Now()
	var err error
	if t == nil {
		msg.SetContext(ctx)
		err = r.send(e, msg)
	} else {
		spanCtx, span := r.startSpan(ctx, t, e)
		msg.SetContext(spanCtx)
		err = r.send(e, msg)
		endSpan(span, err)
	}
	r.met.recordSend(ctx, e.Topic, time.Since(start), err)
	return err
}

// message is the message the relay publishes for e: Message, with the
// CloudEvents headers when configured.
func (r *Relay) message(e txoutbox.Event) *message.Message {
	msg := Message(e)
	if r.cfg.CloudEvents.Enabled {
		r.cfg.CloudEvents.set(msg, e, r.cfg.Table)
	}
	return msg
}

// startSpan starts the producer span of publishing e.
func (r *Relay) startSpan(ctx context.Context, t trace.Tracer, e txoutbox.Event) (context.Context, trace.Span) {
	system := messagingSystem(r.cfg.MessagingSystem, r.pub)
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", system),
		attribute.String("messaging.operation.name", "send"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", e.Topic),
		attribute.String("messaging.message.id", e.ID.String()),
	}
	if system == "kafka" {
		attrs = append(attrs, attribute.String("messaging.kafka.message.key", e.AggregateID))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...)}
	created := trace.SpanContextFromContext(textPropagator(r.cfg.Propagator).Extract(context.Background(), propagation.MapCarrier(e.Headers)))
	if created.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: created}))
	}
	return t.Start(ctx, "send "+e.Topic, opts...)
}

// endSpan ends a publish span with the publish's outcome.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(attribute.String("error.type", errorType(err)))
	}
	span.End()
}

func (r *Relay) send(e txoutbox.Event, msg *message.Message) error {
	if err := r.pub.Publish(e.Topic, msg); err != nil {
		return fmt.Errorf("publish event %s to %s: %w", e.ID, e.Topic, err)
	}
	return nil
}

// messagingSystem names the broker behind pub for messaging.system: set
// explicitly, or known from the Watermill publisher's package.
func messagingSystem(set string, pub message.Publisher) string {
	if set != "" {
		return set
	}
	t := reflect.TypeOf(pub)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	path := t.PkgPath()
	for _, known := range []struct{ pkg, system string }{
		{"watermill-kafka", "kafka"},
		{"txoutbox/relay/kafkapub", "kafka"},
		{"watermill-amqp", "rabbitmq"},
		{"watermill-googlecloud", "gcp_pubsub"},
		{"watermill-aws", "aws_sqs"},
		{"watermill-nats", "nats"},
		{"watermill-redisstream", "redis"},
		{"watermill-sql", "sql"},
	} {
		if strings.Contains(path, known.pkg) {
			return known.system
		}
	}
	return "_OTHER"
}

// errorType is a bounded description of a publish failure for the
// error.type attribute: the Kafka error code, a timeout, or the Go type of
// the innermost error.
func errorType(err error) string {
	if code, ok := kafkaErrorCode(err); ok {
		return "kafka_error_" + strconv.FormatInt(code, 10)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return fmt.Sprintf("%T", err)
		}
		err = next
	}
}

// kafkaErrorCode finds a Sarama broker error (sarama.KError, an int16 code)
// in err's tree. It matches the type by package path and name, as
// messagingSystem does, so the relay does not compile Sarama into programs
// that publish elsewhere.
func kafkaErrorCode(err error) (int64, bool) {
	if err == nil {
		return 0, false
	}
	v := reflect.ValueOf(err)
	if t := v.Type(); t.Name() == "KError" && t.PkgPath() == "github.com/IBM/sarama" && v.CanInt() {
		return v.Int(), true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return kafkaErrorCode(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if code, ok := kafkaErrorCode(e); ok {
				return code, true
			}
		}
	}
	return 0, false
}
