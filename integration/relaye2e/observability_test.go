package relaye2e

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/relaytest"
	"github.com/txoutbox/txoutbox/relay/walrelay"
)

// recordMetrics returns a meter provider, shut down when the test ends,
// and the manual reader that collects what it records.
func recordMetrics(t *testing.T) (*sdkmetric.ManualReader, *sdkmetric.MeterProvider) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return reader, mp
}

// meteredConfig is fastConfig with the relay's metrics recorded by the
// reader it returns.
func (b *bundle) meteredConfig(t *testing.T) (relay.Config, *sdkmetric.ManualReader) {
	reader, mp := recordMetrics(t)
	cfg := b.fastConfig()
	cfg.MeterProvider = mp
	return cfg, reader
}

// collect reads what the reader's provider has recorded so far.
func collect(t *testing.T, reader sdkmetric.Reader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

// histogramPoints returns the data points of the named float histogram.
func histogramPoints(rm metricdata.ResourceMetrics, name string) []metricdata.HistogramDataPoint[float64] {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name {
				return h.DataPoints
			}
		}
	}
	return nil
}

// publishDurationBuckets are the publish-duration histogram's bucket
// boundaries, in seconds, that docs/operating.md promises: 1ms to 10s.
var publishDurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// pacedPublisher acknowledges after a delay that cycles through delays, as
// a broker whose acknowledgements take from a millisecond to a second.
type pacedPublisher struct {
	delays []time.Duration
	n      atomic.Int64
}

func (p *pacedPublisher) Publish(topic string, msgs ...*message.Message) error {
	i := p.n.Add(1)
	time.Sleep(p.delays[int(i)%len(p.delays)]) // about time: the durations measured
	if topic == "refused" {
		return relay.Permanent(relay.ErrInvalidConfig) // any error: its type is what is recorded
	}
	return nil
}

func (p *pacedPublisher) Close() error { return nil }

// The publish-duration histogram has buckets in seconds, so publishes of
// different speeds land in different buckets, and its points carry the
// topic and, on failure, the error type.
func TestPublishDurationHistogram(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg, reader := b.meteredConfig(t)
	cfg.MaxAttempts = 1
	b.write(t, "orders", 12, 12)
	b.write(t, "refused", 1, 1)
	pub := &pacedPublisher{delays: []time.Duration{0, 3 * time.Millisecond, 30 * time.Millisecond, 300 * time.Millisecond}}
	runRelay(t, b.db, pub, cfg)
	waitFor(t, 20*time.Second, "13 publishes", func() bool {
		return count(t, b.db, "SELECT count(*) FROM outbox WHERE state IN ('published', 'dead')") == 13
	})

	points := histogramPoints(collect(t, reader), "txoutbox.relay.publish.duration")
	var orders, refused *metricdata.HistogramDataPoint[float64]
	for i, p := range points {
		topic, _ := p.Attributes.Value("messaging.destination.name")
		switch topic.AsString() {
		case "orders":
			orders = &points[i]
		case "refused":
			refused = &points[i]
		}
	}
	if orders == nil || refused == nil {
		t.Fatalf("histogram points %+v: want one per topic", points)
	}
	if !slices.Equal(orders.Bounds, publishDurationBuckets) {
		t.Errorf("bucket bounds %v, want %v", orders.Bounds, publishDurationBuckets)
	}
	used := 0
	for _, c := range orders.BucketCounts {
		if c > 0 {
			used++
		}
	}
	if orders.Count != 12 || used < 2 {
		t.Errorf("12 publishes from 0 to 300ms fell in %d bucket(s): %v over %v", used, orders.BucketCounts, orders.Bounds)
	}
	if _, ok := orders.Attributes.Value("error.type"); ok {
		t.Errorf("successful publishes carry error.type: %v", orders.Attributes)
	}
	if et, _ := refused.Attributes.Value("error.type"); et.AsString() != "*errors.errorString" {
		t.Errorf("failed publish error.type = %q, want the error's type", et.AsString())
	}
	if refused.Attributes.Len() != 3 {
		t.Errorf("failed publish attributes %v: want only topic, table and error.type", refused.Attributes.ToSlice())
	}
	if tb, _ := refused.Attributes.Value("txoutbox.table"); tb.AsString() != b.db.Schema+".outbox" {
		t.Errorf("failed publish txoutbox.table = %q, want %q", tb.AsString(), b.db.Schema+".outbox")
	}
}

// The WAL relay records the polling relay's publish span and publish
// metrics, with the same names and attributes, under its own
// instrumentation scope, which tells the modes apart.
func TestWALRelayRecordsPublishSpansAndMetrics(t *testing.T) {
	testkit.RequireLogical(t)
	t.Parallel()
	db := testkit.NewOutbox(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		testkit.Eventually(20*time.Second, func() bool { // the slot stays active until its walsender has exited
			_, err := db.SQL.ExecContext(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`,
				walrelay.SlotDefault(db.Database(), db.Table()))
			return err == nil || ctx.Err() != nil
		})
		_, _ = db.SQL.ExecContext(ctx, `DROP PUBLICATION IF EXISTS `+walrelay.PublicationDefault(db.Database(), db.Table()))
	})
	spans, tp := recordSpans(t)
	reader, mp := recordMetrics(t)
	pub := relaytest.NewPublisher()
	r, err := walrelay.New(db.URL, pub, walrelay.Config{Table: db.Table(), StandbyRetry: 100 * time.Millisecond,
		TracerProvider: tp, MeterProvider: mp,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(t.Context()) }() // cancelled before the cleanups run
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("WAL relay: %v", err)
		}
	})
	ev, err := txoutbox.NewEvent("wal-traced", "order", "o-1", "order.placed", map[string]string{"id": "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: db.Table(), DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Commit(t, context.Background(), db.SQL, w, ev)

	span := waitForSpan(t, spans, "send wal-traced")
	const scope = "github.com/txoutbox/txoutbox/relay/walrelay"
	if span.InstrumentationScope.Name != scope || span.SpanKind != trace.SpanKindProducer {
		t.Errorf("publish span of scope %q, kind %v; want %q, producer", span.InstrumentationScope.Name, span.SpanKind, scope)
	}
	checkSpanAttributes(t, span, map[string]string{
		"messaging.system": "_OTHER", "messaging.operation.name": "send", "messaging.operation.type": "send",
		"messaging.destination.name": "wal-traced", "messaging.message.id": ev.ID.String(),
	})

	rm := collect(t, reader)
	ours := slices.IndexFunc(rm.ScopeMetrics, func(sm metricdata.ScopeMetrics) bool { return sm.Scope.Name == scope })
	for _, name := range []string{"txoutbox.relay.publish.duration", "messaging.client.sent.messages", "txoutbox.wal.published"} {
		if ours < 0 || !slices.ContainsFunc(rm.ScopeMetrics[ours].Metrics, func(m metricdata.Metrics) bool { return m.Name == name }) {
			t.Errorf("no %s under scope %s: %+v", name, scope, rm.ScopeMetrics)
		}
	}
	points := histogramPoints(rm, "txoutbox.relay.publish.duration")
	if len(points) != 1 || points[0].Count != 1 || !slices.Equal(points[0].Bounds, publishDurationBuckets) {
		t.Errorf("publish duration points %+v: want one publish, in the polling relay's buckets", points)
	}
}
