package relaytest

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

func TestReadStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	s, err := relay.ReadStats(ctx, b.db.SQL, b.db.Table())
	if err != nil || s.Backlog != 0 || s.Lag != 0 || s.Dead != 0 {
		t.Fatalf("empty outbox: %+v, %v", s, err)
	}
	b.write(t, "orders", 10, 2)
	b.write(t, "payments", 4, 2)
	if _, err := b.db.SQL.Exec(`UPDATE outbox SET created_at = now() - interval '90 seconds' WHERE id = 1;
		UPDATE outbox SET state = 'dead' WHERE id IN (2, 3);
		UPDATE outbox SET state = 'published', published_at = now() WHERE id = 4`); err != nil {
		t.Fatal(err)
	}
	s, err = relay.ReadTopicStats(ctx, b.db.SQL, b.db.Table())
	if err != nil {
		t.Fatal(err)
	}
	if s.Backlog != 11 || s.Dead != 2 || s.Lag < 90*time.Second || s.Lag > 120*time.Second {
		t.Fatalf("stats = %+v, want backlog 11, dead 2, lag about 90s", s)
	}
	if len(s.Topics) != 2 || s.Topics[0].Topic != "orders" || s.Topics[0].Backlog != 7 || s.Topics[0].Dead != 2 ||
		s.Topics[0].Lag < 90*time.Second || s.Topics[1].Backlog != 4 || s.Topics[1].Lag > 30*time.Second {
		t.Fatalf("topic stats = %+v", s.Topics)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reader := metric.NewManualReader()
	cfg := b.fastConfig()
	cfg.MeterProvider = metric.NewMeterProvider(metric.WithReader(reader))
	want := b.write(t, "orders", 100, 4)
	runRelay(t, b.db, b.kafkaPublisher(t, kafkapub.Config{}), cfg)
	check(t, want, consume(t, b.brokers, "orders", len(want), 30*time.Second))

	var published, shards int64
	waitFor(t, 10*time.Second, "the published counter and owned shards gauge", func() bool {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		found := map[string]bool{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				found[m.Name] = true
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					if m.Name == "txoutbox.relay.published" {
						published = d.DataPoints[0].Value
						if topic, _ := d.DataPoints[0].Attributes.Value("messaging.destination.name"); topic.AsString() != "orders" {
							t.Fatalf("published counted without its topic: %v", d.DataPoints[0].Attributes)
						}
					}
				case metricdata.Gauge[int64]:
					if m.Name == "txoutbox.relay.shards.owned" {
						shards = d.DataPoints[0].Value
					}
				}
			}
		}
		for _, name := range []string{"txoutbox.outbox.lag", "txoutbox.outbox.backlog", "txoutbox.outbox.dead",
			"txoutbox.relay.publish.duration", "txoutbox.relay.claim.batch_size"} {
			if !found[name] {
				return false
			}
		}
		return published >= 100 && shards == 256 // more: a duplicate after a stall
	})
}
