package publish

import (
	"context"
	"reflect"
	"strings"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/txoutbox/txoutbox"
)

// tracing resolves the tracer of a Core. A nil provider means the global
// one, looked up at each publish so a provider set after New is used; a
// provider that does no tracing (a no-op one, or the global placeholder
// while no application has set a provider) gives a nil tracer, and then
// no tracing work is done per event.
type tracing struct {
	scope  string
	fixed  trace.Tracer // the configured provider's; nil with global
	global bool         // no provider configured: follow the global one
	cache  atomic.Pointer[cachedTracer]
}

// cachedTracer is the tracer of the global provider last seen.
type cachedTracer struct {
	tp trace.TracerProvider
	t  trace.Tracer
}

func newTracing(tp trace.TracerProvider, scope string) *tracing {
	if tp == nil {
		return &tracing{scope: scope, global: true}
	}
	return &tracing{scope: scope, fixed: tracerOf(tp, scope)}
}

// tracer returns the tracer to use now, or nil for none. With the global
// provider it costs an atomic load and a comparison per event.
func (t *tracing) tracer() trace.Tracer {
	if !t.global {
		return t.fixed
	}
	tp := otel.GetTracerProvider()
	if !reflect.TypeOf(tp).Comparable() {
		return tracerOf(tp, t.scope)
	}
	if c := t.cache.Load(); c != nil && c.tp == tp {
		return c.t
	}
	tr := tracerOf(tp, t.scope)
	t.cache.Store(&cachedTracer{tp: tp, t: tr})
	return tr
}

// tracerOf is tp's tracer for scope, or nil when tp does no tracing.
func tracerOf(tp trace.TracerProvider, scope string) trace.Tracer {
	if _, ok := tp.(noop.TracerProvider); ok || isUnsetGlobal(tp) {
		return nil
	}
	return tp.Tracer(scope)
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

// startSpan starts the producer span "send <topic>" of publishing e,
// following the messaging semantic conventions, linked to the span that
// wrote the event (the creation context in its headers, which travels to
// consumers unchanged).
func (c *Core) startSpan(ctx context.Context, t trace.Tracer, e *txoutbox.Event) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", c.system),
		attribute.String("messaging.operation.name", "send"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", e.Topic),
		attribute.String("messaging.message.id", e.ID.String()),
		attribute.String(TableAttribute, c.table),
	}
	if c.system == "kafka" {
		attrs = append(attrs, attribute.String("messaging.kafka.message.key", e.AggregateID))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...)}
	created := trace.SpanContextFromContext(textPropagator(c.propagator).Extract(context.Background(), propagation.MapCarrier(e.Headers)))
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
