package relaytest

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/txoutbox/txoutbox/relay"
)

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

// pacedPublisher acknowledges after a delay that cycles through delays, as
// a broker whose acknowledgements take from a millisecond to a second.
type pacedPublisher struct {
	delays []time.Duration
	n      atomic.Int64
}

func (p *pacedPublisher) Publish(topic string, msgs ...*message.Message) error {
	i := p.n.Add(1)
	time.Sleep(p.delays[int(i)%len(p.delays)])
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
	reader := sdkmetric.NewManualReader()
	cfg := b.fastConfig()
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	cfg.MaxAttempts = 1
	b.write(t, "orders", 12, 12)
	b.write(t, "refused", 1, 1)
	pub := &pacedPublisher{delays: []time.Duration{0, 3 * time.Millisecond, 30 * time.Millisecond, 300 * time.Millisecond}}
	runRelay(t, b.db, pub, cfg)
	waitFor(t, 20*time.Second, "13 publishes", func() bool {
		return count(t, b.db, "SELECT count(*) FROM outbox WHERE state IN ('published', 'dead')") == 13
	})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	points := histogramPoints(rm, "txoutbox.relay.publish.duration")
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
	if !slices.Equal(orders.Bounds, relay.PublishDurationBuckets) {
		t.Errorf("bucket bounds %v, want %v", orders.Bounds, relay.PublishDurationBuckets)
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
	if refused.Attributes.Len() != 2 {
		t.Errorf("failed publish attributes %v: want only topic and error.type", refused.Attributes.ToSlice())
	}
}
