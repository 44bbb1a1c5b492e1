package relaye2e

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg, reader := b.meteredConfig(t)
	want := b.write(t, "orders", 100, 4)
	runRelay(t, b.db, b.kafkaPublisher(t, kafkapub.Config{}), cfg)
	check(t, want, consume(t, b.brokers, "orders", len(want), 30*time.Second))

	var published, shards int64
	waitFor(t, 10*time.Second, "the published counter and owned shards gauge", func() bool {
		found := map[string]bool{}
		for _, sm := range collect(t, reader).ScopeMetrics {
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
