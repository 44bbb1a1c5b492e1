package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay"
)

// TestTraceThroughTheOutbox follows one event from the span that wrote it,
// through the relay's publish span, to the Kafka record a consumer reads.
func TestTraceThroughTheOutbox(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	// The application: a request span, and the event written in it.
	ctx, reqSpan := tp.Tracer("app").Start(context.Background(), "POST /orders")
	tx, err := b.db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := txoutbox.NewEvent("traced", "order", "o-1", "order.placed", map[string]string{"id": "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.writer.Write(ctx, tx, ev); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	reqSpan.End()
	written := reqSpan.SpanContext()

	cfg := b.fastConfig()
	cfg.TracerProvider = tp
	runRelay(t, b.db, b.kafkaPublisher(t, relay.KafkaConfig{}), cfg)

	// The consumer: the record's headers carry a trace context.
	rec := firstRecord(t, b.brokers, "traced")
	headers := propagation.MapCarrier{}
	for _, h := range rec.Headers {
		headers[h.Key] = string(h.Value)
	}
	if headers[relay.MetadataEventID] != ev.ID.String() {
		t.Fatalf("record event_id = %q, want %s", headers[relay.MetadataEventID], ev.ID)
	}
	consumed := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), headers))
	if !consumed.IsValid() {
		t.Fatalf("record headers %v carry no valid trace context", headers)
	}

	// The relay's publish span: linked to the writer's span, and the parent
	// the consumer continues from.
	var publish *tracetest.SpanStub
	waitFor(t, 5*time.Second, "the publish span to end", func() bool {
		for _, s := range spans.GetSpans() {
			if s.Name == "send traced" {
				publish = &s
				return true
			}
		}
		return false
	})
	if publish.SpanKind != trace.SpanKindProducer {
		t.Errorf("publish span kind = %v, want producer", publish.SpanKind)
	}
	if len(publish.Links) != 1 || publish.Links[0].SpanContext.TraceID() != written.TraceID() ||
		publish.Links[0].SpanContext.SpanID() != written.SpanID() {
		t.Errorf("publish span links = %+v, want one link to the writer's span %s/%s", publish.Links, written.TraceID(), written.SpanID())
	}
	if consumed.TraceID() != publish.SpanContext.TraceID() || consumed.SpanID() != publish.SpanContext.SpanID() {
		t.Errorf("record carries %s/%s, want the publish span %s/%s",
			consumed.TraceID(), consumed.SpanID(), publish.SpanContext.TraceID(), publish.SpanContext.SpanID())
	}
	if !consumed.IsSampled() {
		t.Errorf("record trace context is not sampled")
	}
}

// firstRecord reads the first record of topic with an independent client.
func firstRecord(t *testing.T, brokers []string, topic string) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		if recs := fetches.Records(); len(recs) > 0 {
			return recs[0]
		}
	}
	t.Fatalf("no record on %s within 20s", topic)
	return nil
}
