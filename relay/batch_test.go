package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
)

// batchRecorder is a BatchPublisher that records every call, refuses the
// first failures[aggregate] messages of an aggregate, and reports each
// message's outcome.
type batchRecorder struct {
	mu        sync.Mutex
	failures  map[string]int
	calls     [][]string          // aggregate ids per PublishBatch call
	delivered map[string][]string // event ids acknowledged, per aggregate
	attempts  map[string]int      // publishes per event id
	single    int                 // Publish calls
}

func newBatchRecorder(failures map[string]int) *batchRecorder {
	return &batchRecorder{failures: failures, delivered: map[string][]string{}, attempts: map[string]int{}}
}

func (p *batchRecorder) one(msg *message.Message) error {
	agg := msg.Metadata.Get(txoutbox.HeaderAggregateID)
	p.attempts[msg.UUID]++
	if p.failures[agg] > 0 {
		p.failures[agg]--
		return errors.New("refused")
	}
	p.delivered[agg] = append(p.delivered[agg], msg.UUID)
	return nil
}

func (p *batchRecorder) Publish(_ string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.single++
	for _, msg := range msgs {
		if err := p.one(msg); err != nil {
			return err
		}
	}
	return nil
}

func (p *batchRecorder) PublishBatch(topics []string, msgs []*message.Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var aggs []string
	var errs []error
	for i, msg := range msgs {
		aggs = append(aggs, msg.Metadata.Get(txoutbox.HeaderAggregateID))
		if err := p.one(msg); err != nil {
			if errs == nil {
				errs = make([]error, len(msgs))
			}
			errs[i] = err
		}
		_ = topics[i]
	}
	p.calls = append(p.calls, aggs)
	return errs
}

func (*batchRecorder) Close() error { return nil }

// With a BatchPublisher, lanes send the events queued in them together,
// never two of one aggregate in a call, and a refused event still holds
// back its aggregate's later events until it is published: each aggregate's
// events are acknowledged in id order, each exactly once.
func TestLanesBatchDistinctAggregatesInOrder(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	var aggs []string
	for i := range 40 {
		aggs = append(aggs, fmt.Sprintf("agg-%d", i))
	}
	b.write(t, 5, aggs...) // 200 rows, aggregates interleaved
	pub := newBatchRecorder(map[string]int{"agg-3": 2, "agg-17": 1})
	r := b.newRelayWith(t, pub, Config{Table: b.db.Table(), ID: "r1", Logger: slog.New(slog.DiscardHandler),
		Lanes: 2, LaneBatch: 8, PollInterval: 20 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, StaleAfter: time.Second,
		LeaseDuration: 2 * time.Second, BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	stop := start(t, r)
	b.waitPublished(t, 20*time.Second, 200)
	stop()

	pub.mu.Lock()
	defer pub.mu.Unlock()
	multi := 0
	for _, call := range pub.calls {
		if len(call) > 8 {
			t.Errorf("a call sent %d events, more than LaneBatch 8", len(call))
		}
		seen := map[string]bool{}
		for _, agg := range call {
			if seen[agg] {
				t.Fatalf("one call sent two events of %s: %v", agg, call)
			}
			seen[agg] = true
		}
		if len(call) > 1 {
			multi++
		}
	}
	if multi == 0 {
		t.Fatalf("no call sent more than one event (%d batch calls, %d single publishes)", len(pub.calls), pub.single)
	}
	rows, err := b.db.SQL.Query(`SELECT aggregate_id, event_id::text FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	want := map[string][]string{}
	for rows.Next() {
		var agg, id string
		if err := rows.Scan(&agg, &id); err != nil {
			t.Fatal(err)
		}
		want[agg] = append(want[agg], id)
	}
	for _, agg := range aggs {
		if fmt.Sprint(pub.delivered[agg]) != fmt.Sprint(want[agg]) {
			t.Errorf("%s acknowledged %v, want %v (id order, once each)", agg, pub.delivered[agg], want[agg])
		}
	}
	if got := pub.attempts[want["agg-3"][0]]; got != 3 {
		t.Errorf("agg-3's first event was sent %d times, want 3 (two refusals)", got)
	}
}

// The dispatcher claims a full batch when MaxInFlight leaves room for one
// beside a batch in flight, and from half a batch of room otherwise.
func TestClaimAtIsAFullBatchWhenThereIsRoomForTwo(t *testing.T) {
	for _, c := range []struct{ batch, maxInFlight, want int }{
		{1000, 2000, 1000}, // the defaults
		{1000, 5000, 1000},
		{1000, 1500, 500},
		{1000, 1000, 500},
		{1, 1, 1}, // never a claim with no room
		{10, 19, 9},
	} {
		cl := &claimer{claimerDeps: claimerDeps{cfg: Config{BatchSize: c.batch, MaxInFlight: c.maxInFlight}}}
		if got := cl.claimAt(); got != c.want {
			t.Errorf("BatchSize %d, MaxInFlight %d: claimAt = %d, want %d", c.batch, c.maxInFlight, got, c.want)
		}
	}
}
