package walrelay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
)

// take hands a lane's queued events over together, up to the limit, and
// stops before a second event of one aggregate, which stays queued, in
// order, ahead of everything after it.
func TestLaneTakesDistinctAggregates(t *testing.T) {
	l := &lane{}
	for i, agg := range []string{"a", "b", "a", "c", "d"} {
		l.queue = append(l.queue, work{ev: &event{row: int64(i + 1), e: txoutbox.Event{AggregateID: agg}}})
	}
	rows := func(ws []work) string {
		var out []int64
		for _, w := range ws {
			out = append(out, w.ev.row)
		}
		return fmt.Sprint(out)
	}
	for _, step := range []struct {
		limit       int
		batch, left string
	}{
		{8, "[1 2]", "[3 4 5]"},
		{2, "[3 4]", "[5]"},
		{8, "[5]", "[]"},
		{8, "[]", "[]"},
	} {
		batch := l.take(nil, step.limit)
		if rows(batch) != step.batch || rows(l.queue) != step.left {
			t.Fatalf("take(limit %d) = %s, queue %s; want %s, queue %s", step.limit, rows(batch), rows(l.queue), step.batch, step.left)
		}
	}
}

// blipPublisher refuses every message of its first call (a broker blip),
// then accepts everything, and records the calls.
type blipPublisher struct {
	mu    sync.Mutex
	calls []int // messages per call
}

func (p *blipPublisher) call(n int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, n)
	return len(p.calls) == 1
}

func (p *blipPublisher) Publish(_ string, msgs ...*message.Message) error {
	if p.call(len(msgs)) {
		return errors.New("broker blip")
	}
	return nil
}

func (p *blipPublisher) PublishBatch(_ []string, msgs []*message.Message) []error {
	if !p.call(len(msgs)) {
		return nil
	}
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = errors.New("broker blip")
	}
	return errs
}

func (*blipPublisher) Close() error { return nil }

// A batch that failed whole is retried whole after one backoff, not event
// by event with a backoff each: a blip costs one backoff, as it did when
// lanes sent one event at a time, and the transaction settles then.
func TestLaneRetriesAFailedBatchTogether(t *testing.T) {
	pub := &blipPublisher{}
	const backoffMin = 200 * time.Millisecond
	r, err := New("postgres://x@127.0.0.1/x", pub, Config{Lanes: 1, LaneBatch: 8,
		BackoffMin: backoffMin, BackoffMax: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ls := newLanes(context.Background(), r.cfg.Lanes, r.laneDeps(nil))
	defer ls.stop()
	tx := &txn{end: 1}
	for i := range 8 {
		tx.events = append(tx.events, event{e: txoutbox.Event{AggregateID: fmt.Sprintf("agg-%d", i), Topic: "t"}})
	}
	ls.push(tx)
	deadline := time.After(10 * time.Second)
	for tx.pending.Load() != 0 {
		select {
		case <-ls.settled:
		case <-deadline:
			t.Fatalf("transaction not settled after 10s; calls %v", pub.calls)
		}
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	// Usually [8 8]. The lane may start on the first events before the
	// rest are queued ([1 1 7] under load): what matters is that the
	// failed batch, whatever it held, went again whole, once.
	sent := 0
	for _, n := range pub.calls[min(1, len(pub.calls)):] {
		sent += n
	}
	if len(pub.calls) < 2 || pub.calls[1] != pub.calls[0] || sent != 8 {
		t.Fatalf("calls of %v messages, want the failed first batch again, once, then the rest (8 in all after the failure)", pub.calls)
	}
}
