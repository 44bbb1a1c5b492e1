package publish

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// durationBuckets are the bucket boundaries, in seconds, of the
// publish-duration histogram: those the messaging semantic conventions
// advise for operation durations (5ms to 10s), with 1ms and 2.5ms added
// below for brokers on the same network, which acknowledge in a few
// milliseconds. OpenTelemetry's default boundaries are meant for
// milliseconds (0, 5, 10, 25, ... 10000) and put every publish in one
// bucket.
func durationBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
}

// TableAttribute is the attribute naming the outbox table, TableValue of
// its Config.Table: on every measurement of a polling relay (package
// relay), on the publish metrics and spans this package records in both
// modes, but not on a WAL relay's own txoutbox.wal.* metrics, which carry
// its slot. Its values are as many as the tables served (one per schema of
// a relay.Group): series are tables × topics (× error types) for the
// publish metrics.
const TableAttribute = "txoutbox.table"

// TableValue is the TableAttribute value of t, also the table's name in
// the logs: "schema.name", or the name alone when the table is
// unqualified. A schema whose name is not plain (a space, a quote, a dot,
// a non-ASCII letter) is quoted as in SQL (ident.Readable), so that each
// table has a value of its own: "\"tenant a\".outbox".
func TableValue(t txoutbox.Table) string {
	return ident.ReadableQualified(t.Schema, cmp.Or(t.Name, txoutbox.TableNameDefault))
}

// instruments are the publish core's: the duration and the count of
// publishes, by topic and, on failure, error type.
type instruments struct {
	duration metric.Float64Histogram
	sent     metric.Int64Counter
	topics   Topics
}

func newInstruments(meter metric.Meter, table string) (*instruments, error) {
	m := &instruments{topics: Topics{Table: table}}
	var err error
	if m.duration, err = meter.Float64Histogram("txoutbox.relay.publish.duration",
		metric.WithDescription("Time from handing an event to the publisher to the broker's acknowledgement or refusal, by topic (messaging.destination.name) and, on failure, error.type."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets()...)); err != nil {
		return nil, err
	}
	if m.sent, err = meter.Int64Counter("messaging.client.sent.messages",
		metric.WithDescription("Events handed to the broker, by topic (messaging.destination.name) and, on failure, error.type (the messaging semantic conventions' counter)."),
		metric.WithUnit("{message}")); err != nil {
		return nil, err
	}
	return m, nil
}

// record records one publish: its duration and count, by table, topic
// and, on failure, error type. Every attribute is bounded: a relay serves
// few tables, topics are few, and errorType names kinds of failure, not
// messages.
func (m *instruments) record(ctx context.Context, topic string, took time.Duration, err error) {
	var set metric.MeasurementOption
	if err == nil {
		set = m.topics.Option(topic)
	} else {
		set = metric.WithAttributeSet(attribute.NewSet(attribute.String("messaging.destination.name", topic),
			attribute.String("error.type", errorType(err)), attribute.String(TableAttribute, m.topics.Table)))
	}
	m.duration.Record(ctx, took.Seconds(), set)
	m.sent.Add(ctx, 1, set)
}

// Topics caches the measurement option of each topic's attribute set
// (messaging.destination.name, and TableAttribute when Table is set), so
// recording by topic allocates nothing on the hot path. The zero value is
// ready to use.
type Topics struct {
	// Table is the TableAttribute value the sets carry (TableValue of the
	// relay's table); empty leaves the attribute out. Set it before the
	// first Option.
	Table string

	m sync.Map // topic → metric.MeasurementOption
}

// Option returns the measurement option of topic.
func (t *Topics) Option(topic string) metric.MeasurementOption {
	if cached, ok := t.m.Load(topic); ok {
		return cached.(metric.MeasurementOption)
	}
	attrs := []attribute.KeyValue{attribute.String("messaging.destination.name", topic)}
	if t.Table != "" {
		attrs = append(attrs, attribute.String(TableAttribute, t.Table))
	}
	set := metric.WithAttributeSet(attribute.NewSet(attrs...))
	t.m.Store(topic, set)
	return set
}
