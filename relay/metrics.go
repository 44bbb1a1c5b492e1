package relay

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// metrics are the relay's OpenTelemetry instruments. The gauges read the
// last Stats the relay sampled (every StatsInterval), so a scrape costs no
// query.
type metrics struct {
	meter           metric.Meter
	published       metric.Int64Counter
	retried         metric.Int64Counter
	dead            metric.Int64Counter
	publishDuration metric.Float64Histogram
	batchSize       metric.Int64Histogram
	lag             metric.Float64ObservableGauge
	backlog         metric.Int64ObservableGauge
	deadRows        metric.Int64ObservableGauge
	shards          metric.Int64ObservableGauge

	mu   sync.Mutex
	last *Stats
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := &metrics{meter: mp.Meter("github.com/txoutbox/txoutbox/relay")}
	var err error
	if m.published, err = m.meter.Int64Counter("txoutbox.relay.published",
		metric.WithDescription("Events the broker acknowledged and the relay marked published."), metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	if m.retried, err = m.meter.Int64Counter("txoutbox.relay.retried",
		metric.WithDescription("Failed publishes that will be retried after a backoff."), metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	if m.dead, err = m.meter.Int64Counter("txoutbox.relay.dead_lettered",
		metric.WithDescription("Events that became dead after MaxAttempts failed publishes."), metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	if m.publishDuration, err = m.meter.Float64Histogram("txoutbox.relay.publish.duration",
		metric.WithDescription("Time from handing an event to the publisher to the broker's acknowledgement."), metric.WithUnit("s")); err != nil {
		return nil, err
	}
	if m.batchSize, err = m.meter.Int64Histogram("txoutbox.relay.claim.batch_size",
		metric.WithDescription("Rows taken by one claim."), metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	if m.lag, err = m.meter.Float64ObservableGauge("txoutbox.outbox.lag",
		metric.WithDescription("Age of the oldest unpublished event. Alert on this, not on relay liveness."), metric.WithUnit("s")); err != nil {
		return nil, err
	}
	if m.backlog, err = m.meter.Int64ObservableGauge("txoutbox.outbox.backlog",
		metric.WithDescription("Unpublished events (pending or claimed)."), metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	if m.deadRows, err = m.meter.Int64ObservableGauge("txoutbox.outbox.dead",
		metric.WithDescription("Dead events waiting for an operator."), metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	if m.shards, err = m.meter.Int64ObservableGauge("txoutbox.relay.shards.owned",
		metric.WithDescription("Shards this relay owns."), metric.WithUnit("{shard}")); err != nil {
		return nil, err
	}
	return m, nil
}

// observe registers the gauge callback for r and returns its unregister.
func (m *metrics) observe(r *Relay) (func() error, error) {
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(m.shards, r.members.owned.Load())
		m.mu.Lock()
		last := m.last
		m.mu.Unlock()
		if last != nil {
			o.ObserveFloat64(m.lag, last.Lag.Seconds())
			o.ObserveInt64(m.backlog, last.Backlog)
			o.ObserveInt64(m.deadRows, last.Dead)
		}
		return nil
	}, m.shards, m.lag, m.backlog, m.deadRows)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}

func (m *metrics) setStats(s Stats) {
	m.mu.Lock()
	m.last = &s
	m.mu.Unlock()
}
