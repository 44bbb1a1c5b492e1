package walrelay

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// instrumentationName names the WAL relay's tracer and meter: the
// instrumentation scope that tells its publish spans and metrics from the
// polling relay's, which have the same names.
const instrumentationName = "github.com/txoutbox/txoutbox/relay/walrelay"

// metrics are the WAL relay's OpenTelemetry instruments. The slot gauges
// read the last sample (every StatsInterval), so a scrape costs no query.
type metrics struct {
	published metric.Int64Counter
	dead      metric.Int64Counter

	mu       sync.Mutex
	sampled  bool
	lagBytes int64
	status   string
	active   bool
}

// newMetrics registers the instruments with mp; the gauges read the
// relay's slot name (nil or "" until Run resolves it) and whether it
// streams from active.
func newMetrics(mp metric.MeterProvider, slotName *atomic.Pointer[string], active *atomic.Bool) (*metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(instrumentationName)
	m := &metrics{}
	var err error
	if m.published, err = meter.Int64Counter("txoutbox.wal.published",
		metric.WithDescription("Events the broker acknowledged, read from the replication slot or the backlog."), metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	if m.dead, err = meter.Int64Counter("txoutbox.wal.dead_lettered",
		metric.WithDescription("Events that became dead (or, table-less, were dropped) after MaxAttempts failed publishes."), metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	lag, err := meter.Int64ObservableGauge("txoutbox.wal.slot.lag",
		metric.WithDescription("WAL the replication slot holds back behind the server's current position, by wal_status (reserved, extended, unreserved, lost). Alert on this: a growing lag fills the server's disk up to max_slot_wal_keep_size, and past it the slot is lost."),
		metric.WithUnit("By"))
	if err != nil {
		return nil, err
	}
	activeGauge, err := meter.Int64ObservableGauge("txoutbox.wal.slot.active",
		metric.WithDescription("1 while this relay streams from the slot, 0 while it stands by."), metric.WithUnit("{relay}"))
	if err != nil {
		return nil, err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		// The slot's name is known once Run has resolved it (see Slot):
		// nothing is observed under a name that is not the slot's.
		var name string
		if p := slotName.Load(); p != nil {
			name = *p
		}
		if name == "" {
			return nil
		}
		slot := attribute.String("txoutbox.wal.slot", name)
		m.mu.Lock()
		defer m.mu.Unlock()
		var a int64
		if active.Load() {
			a = 1
		}
		o.ObserveInt64(activeGauge, a, metric.WithAttributes(slot))
		if m.sampled {
			o.ObserveInt64(lag, m.lagBytes, metric.WithAttributes(slot, attribute.String("txoutbox.wal.status", m.status)))
		}
		return nil
	}, lag, activeGauge)
	return m, err
}

// sample stores a reading of the slot for the gauges.
func (m *metrics) sample(s slotState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sampled, m.lagBytes, m.status = s.exists, s.lagBytes, s.walStatus
}

// watchSlot samples the slot of database every interval until ctx ends,
// and logs loudly when its WAL is at risk. It reads the slot's name as
// Slot does: a session may resolve it again (see leaveLegacySlot).
func (r *Relay) watchSlot(ctx context.Context, q pgxQuerier, database string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		sl := replicationSlot{name: r.Slot(), database: database, sql: r.sql}
		sctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
		st, err := sl.state(sctx, q)
		cancel()
		if err == nil {
			r.met.sample(st)
			if st.walStatus == "unreserved" {
				r.cfg.Logger.Error("the slot's WAL is about to pass max_slot_wal_keep_size: the slot will be lost unless the relay catches up", "slot", sl.name, "lag_bytes", st.lagBytes)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
