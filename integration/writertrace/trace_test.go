package writertrace

import (
	"context"
	"encoding/json"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// headersOf reads back the stored headers of each event, in id order.
func headersOf(t *testing.T, db *testkit.DB) []map[string]string {
	t.Helper()
	rows, err := db.SQL.Query(`SELECT headers::text FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []map[string]string
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		h := map[string]string{}
		if err := json.Unmarshal([]byte(raw), &h); err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestWriterCapturesTraceContext(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	w := testkit.NewWriter(t, db.Table())
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "POST /orders")
	defer span.End()
	// A tracestate entry, to check it is captured too.
	ts, err := trace.ParseTraceState("vendor=42")
	if err != nil {
		t.Fatal(err)
	}
	ctx = trace.ContextWithSpanContext(ctx, span.SpanContext().WithTraceState(ts))
	want := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, want)

	shared := map[string]string{"tenant": "acme"}
	explicit := event("2", 2)
	explicit.Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	untraced := event("3", 3)

	tx, err := db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := event("1", 1)
	first.Headers = shared
	if err := w.Write(ctx, tx, first, explicit); err != nil {
		t.Fatal(err)
	}
	// Without a span in ctx nothing is added.
	if err := w.Write(context.Background(), tx, untraced); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	got := headersOf(t, db)
	if len(got) != 3 {
		t.Fatalf("%d rows, want 3", len(got))
	}
	if got[0]["traceparent"] != want["traceparent"] || got[0]["tracestate"] != "vendor=42" || got[0]["tenant"] != "acme" {
		t.Errorf("traced event headers = %v, want tenant plus %v", got[0], want)
	}
	if len(shared) != 1 {
		t.Errorf("Write modified the caller's headers map: %v", shared)
	}
	if len(got[1]) != 1 || got[1]["traceparent"] != explicit.Headers["traceparent"] {
		t.Errorf("explicit traceparent was overwritten or mixed: %v", got[1])
	}
	if len(got[2]) != 0 {
		t.Errorf("event written without a span got headers %v", got[2])
	}
}

func TestWriterPropagatorCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: db.Table(), Propagator: propagation.NewCompositeTextMapPropagator()})
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "op")
	defer span.End()
	testkit.Commit(t, ctx, db.SQL, w, event("1", 1))
	if got := headersOf(t, db); len(got[0]) != 0 {
		t.Errorf("headers = %v, want none with an empty propagator", got[0])
	}
}

// Without WriterConfig.Propagator the writer uses the global propagator once
// the application set one (here with baggage), not only W3C trace context.
// Not parallel: it sets the global propagator.
func TestWriterDefaultsToTheGlobalPropagator(t *testing.T) {
	db := testkit.NewOutbox(t)
	w := testkit.NewWriter(t, db.Table())
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	defer otel.SetTextMapPropagator(prev)

	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled,
	})
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	ctx := baggage.ContextWithBaggage(trace.ContextWithSpanContext(context.Background(), sc), bag)
	e, err := txoutbox.NewEvent("orders", "order", "1", "order.placed", nil)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Commit(t, ctx, db.SQL, w, e)
	h := headersOf(t, db)[0]
	if h["baggage"] != "tenant=acme" || h["traceparent"] == "" {
		t.Fatalf("headers = %v, want traceparent and the baggage the global propagator injects", h)
	}
}
