package relay

import (
	"context"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/txoutbox/txoutbox"

	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// instrumentationName names the relay's tracer and meter.
const instrumentationName = "github.com/txoutbox/txoutbox/relay"

// TableAttribute is the attribute naming the outbox table on every
// measurement and publish span of a relay, and on the publish metrics and
// spans of a WAL relay (package walrelay; its own txoutbox.wal.* metrics
// carry the slot instead): "schema.name", or the name alone for an
// unqualified table. A relay serves one table and a Group one per schema
// it serves, so its values are as many as the tables served, and the
// publish metrics' series tables × topics (× error types): size the
// MeterProvider's cardinality limit for a large Group (see the package
// doc).
const TableAttribute = publish.TableAttribute

// metrics are the relay's OpenTelemetry instruments, besides the publish
// core's (the publish duration and messages sent). The gauges read the
// figures the relay last sampled (see sampler), so a scrape costs no
// query.
type metrics struct {
	meter     metric.Meter
	published metric.Int64Counter
	retried   metric.Int64Counter
	dead      metric.Int64Counter
	repaired  metric.Int64Counter
	batchSize metric.Int64Histogram
	lag       metric.Float64ObservableGauge
	dueLag    metric.Float64ObservableGauge
	backlog   metric.Int64ObservableGauge
	deadRows  metric.Int64ObservableGauge
	scheduled metric.Int64ObservableGauge
	shards    metric.Int64ObservableGauge
	outage    metric.Float64ObservableGauge
	// lockTimeouts counts the statements that gave up on a lock, and
	// locked reads how long the table has been locked out (see lockout).
	lockTimeouts metric.Int64Counter
	locked       metric.Float64ObservableGauge

	topics publish.Topics           // the counters' attributes by topic, with the table
	table  metric.MeasurementOption // the table's attribute alone, for the rest

	mu                      sync.Mutex
	lagSample, dueLagSample *time.Duration // nil until first read
	backlogCount, deadCount *int64         // nil until first counted
	scheduledCount          *int64         // nil until first counted
}

// newMetrics makes the instruments on mp. Relays sharing a provider (a
// Group's) get the same instruments, which the SDK returns for a name
// asked for again with the same description and unit; table, the
// TableAttribute value on each measurement, tells their figures apart.
func newMetrics(mp metric.MeterProvider, table string) (*metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := &metrics{meter: mp.Meter(instrumentationName), topics: publish.Topics{Table: table},
		table: metric.WithAttributeSet(attribute.NewSet(attribute.String(TableAttribute, table)))}
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
		metric.WithDescription("Events that became dead: refused by the broker (their own fault, see relay.Permanent) after MaxAttempts failed publishes, or undecodable."), metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	if m.repaired, err = m.meter.Int64Counter("txoutbox.relay.repaired",
		metric.WithDescription("Rows no relay writes (in backoff by next_attempt_at alone: restored from an older dump, inserted by hand) that the relay gave the retry_at a relay writes, so they no longer fill its claims; each is named in its log."), metric.WithUnit("{row}")); err != nil {
		return nil, err
	}
	if m.batchSize, err = m.meter.Int64Histogram("txoutbox.relay.claim.batch_size",
		metric.WithDescription("Rows taken by one claim."), metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	if m.lag, err = m.meter.Float64ObservableGauge("txoutbox.outbox.lag",
		metric.WithDescription("How long the oldest due unpublished event has waited (since its creation, or its NotBefore if later; a scheduled event is not lag), "+
			"events held behind a scheduled event of their aggregate included: see txoutbox.outbox.due_lag."), metric.WithUnit("s")); err != nil {
		return nil, err
	}
	if m.dueLag, err = m.meter.Float64ObservableGauge("txoutbox.outbox.due_lag",
		metric.WithDescription("The lag of the events the relay may publish now: txoutbox.outbox.lag leaving out the events held behind a scheduled event "+
			"of their aggregate, which wait by design. Alert on this, not on relay liveness."), metric.WithUnit("s")); err != nil {
		return nil, err
	}
	if m.backlog, err = m.meter.Int64ObservableGauge("txoutbox.outbox.backlog",
		metric.WithDescription("Unpublished events (pending or claimed) that are due: exact up to "+strconv.Itoa(txoutbox.StatsExactMax)+
			", an estimate beyond (see txoutbox.Stats); scheduled ones are counted apart (txoutbox.outbox.scheduled)."), metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	if m.scheduled, err = m.meter.Int64ObservableGauge("txoutbox.outbox.scheduled",
		metric.WithDescription("Unpublished events whose NotBefore is still to come, counted up to "+strconv.Itoa(txoutbox.StatsExactMax)+
			": neither backlog nor lag until then."), metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	if m.deadRows, err = m.meter.Int64ObservableGauge("txoutbox.outbox.dead",
		metric.WithDescription("Dead events waiting for an operator: exact up to "+strconv.Itoa(txoutbox.StatsExactMax)+", PostgreSQL's statistics beyond (see txoutbox.Stats)."), metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	if m.shards, err = m.meter.Int64ObservableGauge("txoutbox.relay.shards.owned",
		metric.WithDescription("Shards this relay owns."), metric.WithUnit("{shard}")); err != nil {
		return nil, err
	}
	if m.outage, err = m.meter.Float64ObservableGauge("txoutbox.relay.outage.duration",
		metric.WithDescription("How long this relay's publishes have failed for an outage (the broker or the way to it away), 0 while none: events are retried until it ends and none goes dead for it."),
		metric.WithUnit("s")); err != nil {
		return nil, err
	}
	if m.lockTimeouts, err = m.meter.Int64Counter("txoutbox.relay.lock_timeouts",
		metric.WithDescription("Statements on the outbox table or its companions that gave up on a lock another session held for Config.LockTimeout (an ALTER TABLE, a VACUUM FULL, a migration): each locks the table out until the lock is gone."),
		metric.WithUnit("{statement}")); err != nil {
		return nil, err
	}
	if m.locked, err = m.meter.Float64ObservableGauge("txoutbox.relay.locked.duration",
		metric.WithDescription("How long this relay's table has been locked out by a lock another session holds, 0 while it is not: the relay runs nothing on it meanwhile but a probe, and the other tables of a group go on."),
		metric.WithUnit("s")); err != nil {
		return nil, err
	}
	return m, nil
}

// observe registers the gauge callback, reading the shards owned, the
// outage's length and how long the table has been locked out from shards,
// outage and locked, and returns its unregister.
// Each relay registers its own, observing its own table's attribute set,
// so relays sharing the instruments never report over one another.
func (m *metrics) observe(shards func() int64, outage, locked func() time.Duration) (func() error, error) {
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(m.shards, shards(), m.table)
		o.ObserveFloat64(m.outage, outage().Seconds(), m.table)
		o.ObserveFloat64(m.locked, locked().Seconds(), m.table)
		m.mu.Lock()
		lag, dueLag, backlog, dead, scheduled := m.lagSample, m.dueLagSample, m.backlogCount, m.deadCount, m.scheduledCount
		m.mu.Unlock()
		if scheduled != nil {
			o.ObserveInt64(m.scheduled, *scheduled, m.table)
		}
		if lag != nil {
			o.ObserveFloat64(m.lag, lag.Seconds(), m.table)
		}
		if dueLag != nil {
			o.ObserveFloat64(m.dueLag, dueLag.Seconds(), m.table)
		}
		if backlog != nil {
			o.ObserveInt64(m.backlog, *backlog, m.table)
		}
		if dead != nil {
			o.ObserveInt64(m.deadRows, *dead, m.table)
		}
		return nil
	}, m.shards, m.outage, m.locked, m.lag, m.dueLag, m.backlog, m.deadRows, m.scheduled)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}

// setLags sets the lag gauges' figures.
func (m *metrics) setLags(lag, dueLag time.Duration) {
	m.mu.Lock()
	m.lagSample, m.dueLagSample = &lag, &dueLag
	m.mu.Unlock()
}

// setBacklog sets the backlog gauge's figure.
func (m *metrics) setBacklog(n int64) {
	m.mu.Lock()
	m.backlogCount = &n
	m.mu.Unlock()
}

// setScheduled sets the scheduled gauge's figure.
func (m *metrics) setScheduled(n int64) {
	m.mu.Lock()
	m.scheduledCount = &n
	m.mu.Unlock()
}

// setDead sets the dead-rows gauge's figure.
func (m *metrics) setDead(n int64) {
	m.mu.Lock()
	m.deadCount = &n
	m.mu.Unlock()
}

// addByTopic adds one to counter per row, by the row's topic.
func (m *metrics) addByTopic(ctx context.Context, counter metric.Int64Counter, rows []*claimedRow) {
	if len(rows) == 0 {
		return
	}
	counts := make(map[string]int64, 1)
	for _, row := range rows {
		counts[row.event.Topic]++
	}
	for topic, n := range counts {
		counter.Add(ctx, n, m.topics.Option(topic))
	}
}
