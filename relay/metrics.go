package relay

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// PublishDurationBuckets are the bucket boundaries, in seconds, of the
// publish-duration histogram: those the messaging semantic conventions
// advise for operation durations (5ms to 10s), with 1ms and 2.5ms added
// below for brokers on the same network, which acknowledge in a few
// milliseconds. OpenTelemetry's default boundaries are meant for
// milliseconds (0, 5, 10, 25, ... 10000) and put every publish in one
// bucket.
var PublishDurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// metrics are the relay's OpenTelemetry instruments. The gauges read the
// figures the relay last sampled (see statsLoop), so a scrape costs no
// query.
type metrics struct {
	meter        metric.Meter
	published    metric.Int64Counter
	retried      metric.Int64Counter
	dead         metric.Int64Counter
	sendDuration metric.Float64Histogram
	sent         metric.Int64Counter
	batchSize    metric.Int64Histogram
	lag          metric.Float64ObservableGauge
	backlog      metric.Int64ObservableGauge
	deadRows     metric.Int64ObservableGauge
	shards       metric.Int64ObservableGauge
	outage       metric.Float64ObservableGauge

	topicAttrs sync.Map // topic → metric.MeasurementOption, see recordSend

	mu                      sync.Mutex
	lagSample               *time.Duration // nil until first read
	backlogCount, deadCount *int64         // nil until first counted
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := &metrics{meter: mp.Meter(instrumentationName)}
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
	if m.sendDuration, err = m.meter.Float64Histogram("txoutbox.relay.publish.duration",
		metric.WithDescription("Time from handing an event to the publisher to the broker's acknowledgement or refusal, by topic (messaging.destination.name) and, on failure, error.type."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(PublishDurationBuckets...)); err != nil {
		return nil, err
	}
	if m.sent, err = m.meter.Int64Counter("messaging.client.sent.messages",
		metric.WithDescription("Events handed to the broker, by topic (messaging.destination.name) and, on failure, error.type (the messaging semantic conventions' counter)."),
		metric.WithUnit("{message}")); err != nil {
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
	if m.outage, err = m.meter.Float64ObservableGauge("txoutbox.relay.outage.duration",
		metric.WithDescription("How long this relay's publishes have failed for an outage (the broker or the way to it away), 0 while none: events are retried until it ends and none goes dead for it."),
		metric.WithUnit("s")); err != nil {
		return nil, err
	}
	return m, nil
}

// observe registers the gauge callback for r and returns its unregister.
func (m *metrics) observe(r *Relay) (func() error, error) {
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(m.shards, r.members.owned.Load())
		o.ObserveFloat64(m.outage, r.outageFor().Seconds())
		m.mu.Lock()
		lag, backlog, dead := m.lagSample, m.backlogCount, m.deadCount
		m.mu.Unlock()
		if lag != nil {
			o.ObserveFloat64(m.lag, lag.Seconds())
		}
		if backlog != nil {
			o.ObserveInt64(m.backlog, *backlog)
		}
		if dead != nil {
			o.ObserveInt64(m.deadRows, *dead)
		}
		return nil
	}, m.shards, m.outage, m.lag, m.backlog, m.deadRows)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}

// setLag sets the lag gauge's figure.
func (m *metrics) setLag(lag time.Duration) {
	m.mu.Lock()
	m.lagSample = &lag
	m.mu.Unlock()
}

// setBacklog sets the backlog gauge's figure.
func (m *metrics) setBacklog(n int64) {
	m.mu.Lock()
	m.backlogCount = &n
	m.mu.Unlock()
}

// setDead sets the dead-rows gauge's figure.
func (m *metrics) setDead(n int64) {
	m.mu.Lock()
	m.deadCount = &n
	m.mu.Unlock()
}

// recordSend records one publish: its duration and count, by topic and, on
// failure, error type. Both attributes are bounded: topics are few, and
// errorType names kinds of failure, not messages.
// The option of a successful send is cached per topic, so the hot path
// allocates nothing for it.
func (m *metrics) recordSend(ctx context.Context, topic string, took time.Duration, err error) {
	var set metric.MeasurementOption
	if err == nil {
		set = m.topic(topic)
	} else {
		set = metric.WithAttributeSet(attribute.NewSet(attribute.String("messaging.destination.name", topic),
			attribute.String("error.type", errorType(err))))
	}
	m.sendDuration.Record(ctx, took.Seconds(), set)
	m.sent.Add(ctx, 1, set)
}

// topic returns the attribute option of a topic, cached, so recording by
// topic allocates nothing on the hot path.
func (m *metrics) topic(topic string) metric.MeasurementOption {
	if cached, ok := m.topicAttrs.Load(topic); ok {
		return cached.(metric.MeasurementOption)
	}
	set := metric.WithAttributeSet(attribute.NewSet(attribute.String("messaging.destination.name", topic)))
	m.topicAttrs.Store(topic, set)
	return set
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
		counter.Add(ctx, n, m.topic(topic))
	}
}
