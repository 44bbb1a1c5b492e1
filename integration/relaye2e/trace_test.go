package relaye2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// TestTraceThroughTheOutbox follows one event from the span that wrote it,
// through the relay's publish span, to the Kafka record a consumer reads.
func TestTraceThroughTheOutbox(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spans, tp := recordSpans(t)

	// The application: a request span, and the event written in it.
	ctx, reqSpan := tp.Tracer("app").Start(context.Background(), "POST /orders")
	ev, err := txoutbox.NewEvent("traced", "order", "o-1", "order.placed", map[string]string{"id": "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Commit(t, ctx, b.db.SQL, b.writer, ev)
	reqSpan.End()
	written := reqSpan.SpanContext()

	cfg := b.fastConfig()
	cfg.TracerProvider = tp
	runRelay(t, b.db, b.kafkaPublisher(t, kafkapub.Config{}), cfg)

	// The consumer: the record's headers carry a trace context.
	rec := firstRecord(t, b.brokers, "traced")
	headers := propagation.MapCarrier(recordHeaders(rec))
	if headers[txoutbox.HeaderEventID] != ev.ID.String() {
		t.Fatalf("record event_id = %q, want %s", headers[txoutbox.HeaderEventID], ev.ID)
	}
	consumed := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), headers))
	if !consumed.IsValid() {
		t.Fatalf("record headers %v carry no valid trace context", headers)
	}

	// The relay's publish span: linked to the writer's span, which the
	// consumer continues from unchanged.
	publish := waitForSpan(t, spans, "send traced")
	if publish.SpanKind != trace.SpanKindProducer {
		t.Errorf("publish span kind = %v, want producer", publish.SpanKind)
	}
	if len(publish.Links) != 1 || publish.Links[0].SpanContext.TraceID() != written.TraceID() ||
		publish.Links[0].SpanContext.SpanID() != written.SpanID() {
		t.Errorf("publish span links = %+v, want one link to the writer's span %s/%s", publish.Links, written.TraceID(), written.SpanID())
	}
	if consumed.TraceID() != written.TraceID() || consumed.SpanID() != written.SpanID() {
		t.Errorf("record carries %s/%s, want the writer's creation context %s/%s unchanged",
			consumed.TraceID(), consumed.SpanID(), written.TraceID(), written.SpanID())
	}
	if !consumed.IsSampled() {
		t.Errorf("record trace context is not sampled")
	}
	checkSpanAttributes(t, publish, map[string]string{
		"messaging.system": "kafka", "messaging.operation.name": "send", "messaging.operation.type": "send",
		"messaging.destination.name": "traced", "messaging.message.id": ev.ID.String(), "messaging.kafka.message.key": "o-1",
	})
}

// The messaging system comes from the publisher in use, not from a
// constant; a failed send carries error.type.
func TestSpanNamesThePublishersSystem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spans, tp := recordSpans(t)
	b.write(t, "elsewhere", 1, 1)
	cfg := b.fastConfig()
	cfg.TracerProvider = tp
	cfg.MaxAttempts = 1
	runRelay(t, b.db, &flakyPublisher{failLeft: map[string]int{"agg-0": 1}}, cfg)
	waitFor(t, 10*time.Second, "the failed send span", func() bool { return len(spans.GetSpans()) > 0 })
	attrs := spanAttributes(spans.GetSpans()[0])
	if attrs["messaging.system"] != "_OTHER" || attrs["error.type"] != "*errors.errorString" {
		t.Errorf("span attributes %v: want messaging.system _OTHER (a publisher the relay does not know) and error.type", attrs)
	}
	if _, ok := attrs["messaging.kafka.message.key"]; ok {
		t.Errorf("a Kafka attribute on a span of another system: %v", attrs)
	}
}

// With no TracerProvider configured the relay uses the global one, set
// before or after New. Not parallel: it sets the process's global provider.
func TestRelayDefaultsToGlobalProviders(t *testing.T) {
	b := setup(t)
	cfg := b.fastConfig()
	_, stop := runRelay(t, b.db, b.kafkaPublisher(t, kafkapub.Config{}), cfg)

	spans, tp := recordSpans(t)
	otel.SetTracerProvider(tp)
	reader, mp := recordMetrics(t)
	otel.SetMeterProvider(mp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { // before the providers shut down
		otel.SetTracerProvider(tracenoop.NewTracerProvider())
		otel.SetMeterProvider(metricnoop.NewMeterProvider())
	})

	b.write(t, "global", 3, 1)
	consume(t, b.brokers, "global", 3, 20*time.Second)
	waitFor(t, 10*time.Second, "three spans on the global provider", func() bool { return len(spans.GetSpans()) >= 3 })
	if histogramPoints(collect(t, reader), "txoutbox.relay.publish.duration") == nil {
		t.Errorf("no publish duration on the global meter provider")
	}
	stop()
}

// recordSpans returns a tracer provider, shut down when the test ends,
// that records every span it ends in the returned exporter.
func recordSpans(t *testing.T) (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return spans, tp
}

// spanAttributes returns a span's attributes by key, as strings.
func spanAttributes(s tracetest.SpanStub) map[string]string {
	attrs := map[string]string{}
	for _, kv := range s.Attributes {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	return attrs
}

// checkSpanAttributes reports each attribute of want the span does not
// carry with that value.
func checkSpanAttributes(t *testing.T, s *tracetest.SpanStub, want map[string]string) {
	t.Helper()
	attrs := spanAttributes(*s)
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("publish span %s = %q, want %q (all: %v)", k, attrs[k], v, attrs)
		}
	}
}

// recordHeaders returns a record's headers by key.
func recordHeaders(rec *kgo.Record) map[string]string {
	h := map[string]string{}
	for _, kv := range rec.Headers {
		h[kv.Key] = string(kv.Value)
	}
	return h
}

// firstRecord reads the first record of topic with an independent client.
func firstRecord(t *testing.T, brokers []string, topic string) *kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var first *kgo.Record
	if err := kafkatest.Consume(ctx, brokers, []string{topic}, 0, func(r *kgo.Record) bool { first = r; return false }); err != nil {
		t.Fatalf("no record on %s within 20s: %v", topic, err)
	}
	return first
}

// waitForSpan waits up to 20s for the span named name to end, and returns
// it.
func waitForSpan(t *testing.T, spans *tracetest.InMemoryExporter, name string) *tracetest.SpanStub {
	t.Helper()
	var span *tracetest.SpanStub
	waitFor(t, 20*time.Second, "span "+name+" to end", func() bool {
		got := spans.GetSpans()
		if i := slices.IndexFunc(got, func(s tracetest.SpanStub) bool { return s.Name == name }); i >= 0 {
			span = &got[i]
		}
		return span != nil
	})
	return span
}
