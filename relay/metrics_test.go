package relay

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

// meterRecorder is a MeterProvider that records every measurement with its
// attribute set, and runs the registered callbacks on collect: enough to
// check what the relay reports, without the SDK (which the relay module
// does not depend on).
type meterRecorder struct {
	noop.MeterProvider

	mu        sync.Mutex
	points    []point
	callbacks map[int]metric.Callback
	next      int
}

// point is one measurement or observation.
type point struct {
	name  string
	attrs attribute.Set
	value float64
}

func newMeterRecorder() *meterRecorder { return &meterRecorder{callbacks: map[int]metric.Callback{}} }

func (p *meterRecorder) Meter(string, ...metric.MeterOption) metric.Meter { return &recMeter{p: p} }

func (p *meterRecorder) record(name string, attrs attribute.Set, v float64) {
	p.mu.Lock()
	p.points = append(p.points, point{name, attrs, v})
	p.mu.Unlock()
}

// collect runs the callbacks once and returns their observations.
func (p *meterRecorder) collect(t *testing.T) []point {
	t.Helper()
	p.mu.Lock()
	cbs := make([]metric.Callback, 0, len(p.callbacks))
	for _, cb := range p.callbacks {
		cbs = append(cbs, cb)
	}
	p.mu.Unlock()
	o := &recObserver{}
	for _, cb := range cbs {
		if err := cb(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	return o.points
}

// recorded returns the measurements recorded so far.
func (p *meterRecorder) recorded() []point {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.points)
}

type recMeter struct {
	noop.Meter
	p *meterRecorder
}

type (
	recCounter struct {
		noop.Int64Counter
		name string
		p    *meterRecorder
	}
	recHistogram struct {
		noop.Int64Histogram
		name string
		p    *meterRecorder
	}
	recFloatHistogram struct {
		noop.Float64Histogram
		name string
		p    *meterRecorder
	}
	recGauge struct {
		noop.Int64ObservableGauge
		name string
	}
	recFloatGauge struct {
		noop.Float64ObservableGauge
		name string
	}
)

func (c recCounter) Add(_ context.Context, v int64, opts ...metric.AddOption) {
	c.p.record(c.name, metric.NewAddConfig(opts).Attributes(), float64(v))
}

func (h recHistogram) Record(_ context.Context, v int64, opts ...metric.RecordOption) {
	h.p.record(h.name, metric.NewRecordConfig(opts).Attributes(), float64(v))
}

func (h recFloatHistogram) Record(_ context.Context, v float64, opts ...metric.RecordOption) {
	h.p.record(h.name, metric.NewRecordConfig(opts).Attributes(), v)
}

func (m *recMeter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return recCounter{name: name, p: m.p}, nil
}

func (m *recMeter) Int64Histogram(name string, _ ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	return recHistogram{name: name, p: m.p}, nil
}

func (m *recMeter) Float64Histogram(name string, _ ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return recFloatHistogram{name: name, p: m.p}, nil
}

func (m *recMeter) Int64ObservableGauge(name string, _ ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	return recGauge{name: name}, nil
}

func (m *recMeter) Float64ObservableGauge(name string, _ ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	return recFloatGauge{name: name}, nil
}

func (m *recMeter) RegisterCallback(cb metric.Callback, _ ...metric.Observable) (metric.Registration, error) {
	m.p.mu.Lock()
	defer m.p.mu.Unlock()
	id := m.p.next
	m.p.next++
	m.p.callbacks[id] = cb
	return &recRegistration{p: m.p, id: id}, nil
}

type recRegistration struct {
	embedded.Registration
	p  *meterRecorder
	id int
}

func (r *recRegistration) Unregister() error {
	r.p.mu.Lock()
	delete(r.p.callbacks, r.id)
	r.p.mu.Unlock()
	return nil
}

type recObserver struct {
	embedded.Observer
	points []point
}

func (o *recObserver) ObserveInt64(inst metric.Int64Observable, v int64, opts ...metric.ObserveOption) {
	o.points = append(o.points, point{inst.(recGauge).name, metric.NewObserveConfig(opts).Attributes(), float64(v)})
}

func (o *recObserver) ObserveFloat64(inst metric.Float64Observable, v float64, opts ...metric.ObserveOption) {
	o.points = append(o.points, point{inst.(recFloatGauge).name, metric.NewObserveConfig(opts).Attributes(), v})
}

// table is the TableAttribute value of a point, "" without one.
func (p point) table() string {
	v, _ := p.attrs.Value(TableAttribute)
	return v.AsString()
}

// Every measurement and observation of a relay carries its table.
func TestMetricsCarryTheTable(t *testing.T) {
	b := setupInternal(t)
	b.write(t, 3, "k", "m")
	mp := newMeterRecorder()
	cfg := fastConfig(b)
	cfg.MeterProvider = mp
	cfg.StatsInterval = 20 * time.Millisecond
	pub := newOutagePublisher(nil)
	r := b.newRelayWith(t, pub, cfg)
	stop := start(t, r)
	defer stop()
	want := b.db.Schema + ".outbox"
	testkit.WaitFor(t, 10*time.Second, "every event published and the gauges sampled", func() bool {
		if b.publishedRows(t) != 6 {
			return false
		}
		names := map[string]bool{}
		for _, p := range mp.collect(t) {
			names[p.name] = true
		}
		return names["txoutbox.outbox.backlog"] && names["txoutbox.outbox.lag"] && names["txoutbox.outbox.due_lag"] && names["txoutbox.outbox.dead"]
	})
	seen := map[string]bool{}
	for _, p := range append(mp.recorded(), mp.collect(t)...) {
		seen[p.name] = true
		if got := p.table(); got != want {
			t.Errorf("%s %v: %s = %q, want %q", p.name, p.attrs.ToSlice(), TableAttribute, got, want)
		}
	}
	for _, name := range []string{"txoutbox.relay.published", "txoutbox.relay.claim.batch_size", "txoutbox.relay.publish.duration",
		"messaging.client.sent.messages", "txoutbox.relay.shards.owned", "txoutbox.relay.outage.duration", "txoutbox.outbox.backlog"} {
		if !seen[name] {
			t.Errorf("no %s recorded (saw %v)", name, seen)
		}
	}
}
