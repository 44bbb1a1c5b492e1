package publish

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/txoutbox/txoutbox"
)

func TestBackoffGrowsWithJitterUpToTheCap(t *testing.T) {
	t.Parallel()
	base, limit := time.Second, time.Minute
	for attempt, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 6: 32 * time.Second, 7: time.Minute, 100: time.Minute} {
		for range 50 {
			d := Backoff(attempt, base, limit)
			if d < want/2 || d > want {
				t.Fatalf("Backoff(%d) = %s, want within [%s, %s]", attempt, d, want/2, want)
			}
		}
	}
}

// Lane is hash/fnv's FNV-1a, the hash the polling relay's lanes used
// before the modes shared it: an aggregate keeps its lane.
func TestLaneIsFNV1a(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"", "a", "order-42", "ünïcode", strings.Repeat("x", 300)} {
		h := fnv.New32a()
		h.Write([]byte(id))
		for _, n := range []int{1, 7, 64} {
			if got, want := Lane(id, n), int(h.Sum32()%uint32(n)); got != want {
				t.Errorf("Lane(%q, %d) = %d, want %d", id, n, got, want)
			}
		}
	}
}

// recorder records what it is handed; outcomes, when set, is what
// PublishBatch returns, and refuse what Publish refuses (by topic).
type recorder struct {
	batches  [][]string // message UUIDs per call
	outcomes []error
	refuse   map[string]error
}

func (p *recorder) Publish(topic string, msgs ...*message.Message) error {
	p.batches = append(p.batches, []string{msgs[0].UUID})
	return p.refuse[topic]
}

func (p *recorder) Close() error { return nil }

type batchRecorder struct{ recorder }

func (p *batchRecorder) PublishBatch(_ []string, msgs []*message.Message) []error {
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.UUID)
	}
	p.batches = append(p.batches, ids)
	return p.outcomes
}

func newCore(t *testing.T, cfg Config) *Core {
	t.Helper()
	cfg.Scope = "test"
	cfg.MeterProvider = metricnoop.NewMeterProvider()
	cfg.TracerProvider = tracenoop.NewTracerProvider()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func events(t *testing.T, topics ...string) []*txoutbox.Event {
	t.Helper()
	var out []*txoutbox.Event
	for i, topic := range topics {
		e, err := txoutbox.NewEvent(topic, "order", fmt.Sprint("agg-", i), "order.placed", map[string]int{"i": i})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &e)
	}
	return out
}

// Several events go in one PublishBatch call only to a BatchPublisher and
// with LaneBatch above 1; otherwise one Publish each. Errors name the
// event and wrap the publisher's.
func TestSendBatchesOnlyWhereItCan(t *testing.T) {
	t.Parallel()
	refused := errors.New("refused")
	single := &recorder{refuse: map[string]error{"bad": refused}}
	c := newCore(t, Config{Publisher: single, LaneBatch: 8})
	evs := events(t, "ok", "bad", "ok")
	errs := c.Send(context.Background(), evs)
	if c.Limit() != 1 || len(single.batches) != 3 {
		t.Fatalf("plain publisher: limit %d, %d calls; want 1, one call per event", c.Limit(), len(single.batches))
	}
	if len(errs) != 3 || errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], refused) || !strings.Contains(errs[1].Error(), evs[1].ID.String()) {
		t.Fatalf("errors %v: want only the second, naming its event and wrapping the publisher's", errs)
	}

	one := &batchRecorder{}
	if c := newCore(t, Config{Publisher: one, LaneBatch: 1}); c.Limit() != 1 || c.Send(context.Background(), evs) != nil || len(one.batches) != 3 {
		t.Fatalf("LaneBatch 1: limit %d, calls %v; want 1, one event per call", c.Limit(), one.batches)
	}

	many := &batchRecorder{}
	c = newCore(t, Config{Publisher: many, LaneBatch: 8})
	if c.Limit() != 8 || c.Send(context.Background(), evs) != nil || len(many.batches) != 1 || len(many.batches[0]) != 3 {
		t.Fatalf("batch publisher: limit %d, calls %v; want 8, one call of 3", c.Limit(), many.batches)
	}
	many.outcomes = []error{nil, refused, nil}
	if errs := c.Send(context.Background(), evs); errs[0] != nil || !errors.Is(errs[1], refused) || errs[2] != nil {
		t.Fatalf("batch errors %v: want the second's only", errs)
	}
	if many.outcomes[1] != refused {
		t.Fatalf("Send rewrote the publisher's slice: %v", many.outcomes)
	}
	// A publisher breaking the contract fails every event: at worst some
	// go out twice, none is marked published unacknowledged.
	many.outcomes = []error{nil}
	if errs := c.Send(context.Background(), evs); len(errs) != 3 || errs[0] == nil || errs[1] == nil || errs[2] == nil {
		t.Fatalf("outcomes of the wrong length gave %v: want every event failed", errs)
	}
}

// The CloudEvents headers come beside the relay's own, with the table as
// the default source.
func TestMessageWithCloudEvents(t *testing.T) {
	t.Parallel()
	e := events(t, "orders")[0]
	e.Headers = map[string]string{"tenant": "t1"}
	plain := newCore(t, Config{Publisher: &recorder{}}).Message(e)
	table := txoutbox.Table{Schema: "app", Name: "outbox"}
	ce := newCore(t, Config{Publisher: &recorder{}, Table: table, CloudEvents: true}).Message(e)
	if plain.UUID != e.ID.String() || string(plain.Payload) != string(e.Payload) || plain.Metadata.Get("tenant") != "t1" ||
		plain.Metadata.Get(txoutbox.HeaderAggregateID) != e.AggregateID || plain.Metadata.Get("ce_id") != "" {
		t.Fatalf("message %+v: want the event's id, payload and headers, no CloudEvents", plain)
	}
	for k, v := range map[string]string{"ce_specversion": "1.0", "ce_id": e.ID.String(), "ce_type": "order.placed",
		"ce_source": "/txoutbox/" + table.String(), "ce_time": e.CreatedAt.UTC().Format(time.RFC3339Nano), "content-type": txoutbox.ContentTypeJSON, "tenant": "t1"} {
		if ce.Metadata.Get(k) != v {
			t.Errorf("CloudEvents message %s = %q, want %q", k, ce.Metadata.Get(k), v)
		}
	}
	if got := newCore(t, Config{Publisher: &recorder{}, CloudEvents: true, CloudEventsSource: "/orders"}).Message(e).Metadata.Get("ce_source"); got != "/orders" {
		t.Errorf("ce_source %q, want the configured /orders", got)
	}
}
