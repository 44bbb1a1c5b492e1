package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// outagePublisher fails every publish with err while failing is set, and
// records, per aggregate, the sequence numbers it acknowledged.
type outagePublisher struct {
	mu      sync.Mutex
	err     func(agg string) error // nil: acknowledge
	acked   map[string][]int
	calls   int
	started chan struct{} // closed at the first call
}

func newOutagePublisher(err func(agg string) error) *outagePublisher {
	return &outagePublisher{err: err, acked: map[string][]int{}, started: make(chan struct{})}
}

func (p *outagePublisher) Publish(_ string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls == 0 {
		close(p.started)
	}
	p.calls++
	for _, m := range msgs {
		agg := m.Metadata.Get(txoutbox.HeaderAggregateID)
		if p.err != nil {
			if err := p.err(agg); err != nil {
				return err
			}
		}
		var seq int
		if _, err := fmt.Sscan(string(m.Payload), &seq); err != nil {
			return err
		}
		p.acked[agg] = append(p.acked[agg], seq)
	}
	return nil
}

func (*outagePublisher) Close() error { return nil }

func (p *outagePublisher) set(err func(agg string) error) {
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
}

// checkOrder fails unless each aggregate's first deliveries are 0..n-1 in
// order (a redelivery may repeat an earlier one).
func (p *outagePublisher) checkOrder(t *testing.T, n int, aggs ...string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, agg := range aggs {
		next := 0
		for _, seq := range p.acked[agg] {
			switch {
			case seq == next:
				next++
			case seq > next:
				t.Fatalf("aggregate %s: event %d delivered before %d (deliveries %v)", agg, seq, next, p.acked[agg])
			}
		}
		if next != n {
			t.Fatalf("aggregate %s: %d of %d events delivered (deliveries %v)", agg, next, n, p.acked[agg])
		}
	}
}

// fastConfig is a relay configuration whose backoffs and heartbeats are
// short enough for a test to go through many of them.
func fastConfig(b *internalBundle) Config {
	return Config{Table: b.db.Table(), ID: "r1", Logger: slog.New(slog.DiscardHandler),
		PollInterval: 10 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, StaleAfter: 10 * time.Second,
		LeaseDuration: 15 * time.Second, BackoffMin: 2 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		OutageBackoffMax: 20 * time.Millisecond}
}

// start runs r until the test ends or stop is called (testkit.Run); an
// error of Run fails the test.
func start(t *testing.T, r *Relay) (stop func()) {
	t.Helper()
	stopRun := testkit.Run(t, r.Run)
	return func() {
		if err := stopRun(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

func (b *internalBundle) count(t *testing.T, query string) int {
	t.Helper()
	var n int
	if err := b.db.SQL.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// publishedRows counts the rows published.
func (b *internalBundle) publishedRows(t *testing.T) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM outbox WHERE state = 'published'`)
}

// eventuallyPublished reports whether n rows are published within timeout.
func (b *internalBundle) eventuallyPublished(t *testing.T, timeout time.Duration, n int) bool {
	t.Helper()
	return testkit.Eventually(timeout, func() bool { return b.publishedRows(t) == n })
}

// waitPublished fails the test unless n rows are published within timeout.
func (b *internalBundle) waitPublished(t *testing.T, timeout time.Duration, n int) {
	t.Helper()
	if !b.eventuallyPublished(t, timeout, n) {
		t.Fatalf("%d rows published after %s, want %d", b.publishedRows(t), timeout, n)
	}
}

// A broker away for many times MaxAttempts backoffs makes no event dead:
// failures that are not the event's fault never count towards dead, and
// once the broker is back every event is delivered, in order.
func TestOutageMakesNoEventDead(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.write(t, 5, "k", "m", "n")
	pub := newOutagePublisher(func(string) error { return errors.New("kafka: client has run out of available brokers to talk to") })
	cfg := fastConfig(b)
	cfg.MaxAttempts = 2
	r := b.newRelayWith(t, pub, cfg)
	start(t, r)
	// Every aggregate's first event failed five times MaxAttempts.
	testkit.WaitFor(t, 60*time.Second, "many failed rounds", func() bool {
		if n := b.count(t, `SELECT count(*) FROM outbox WHERE state = 'dead'`); n != 0 {
			t.Fatalf("%d events dead in an outage", n)
		}
		return b.count(t, `SELECT count(*) FROM outbox WHERE attempts >= 10`) == 3
	})
	if n := b.count(t, `SELECT count(*) FROM outbox WHERE attempts > 0`); n != 3 {
		t.Fatalf("%d events attempted; only each aggregate's first should be, the rest fenced behind it", n)
	}
	if d := r.outage.lasted(); d <= 0 {
		t.Fatalf("outage gauge reads %s during the outage", d)
	}
	pub.set(nil)
	b.waitPublished(t, 30*time.Second, 15)
	pub.checkOrder(t, 5, "k", "m", "n")
	if d := r.outage.lasted(); d != 0 {
		t.Fatalf("outage gauge reads %s after the outage", d)
	}
}

// An event the broker refuses (Permanent) is dead after MaxAttempts, and
// its aggregate's later events and other aggregates' flow.
func TestPermanentRefusalMakesTheEventDeadAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.write(t, 3, "k", "m")
	refusals := 0
	pub := newOutagePublisher(func(agg string) error {
		if agg == "k" && refusals < 3 { // k's first event, three times
			refusals++
			return Permanent(errors.New("kafka server: Message was too large"))
		}
		return nil
	})
	cfg := fastConfig(b)
	cfg.MaxAttempts = 3
	r := b.newRelayWith(t, pub, cfg)
	start(t, r)
	testkit.WaitFor(t, 30*time.Second, "the refused event dead, the rest published", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox WHERE state = 'dead' AND attempts = 3 AND id = 1`) == 1 &&
			b.count(t, `SELECT count(*) FROM outbox WHERE state = 'published'`) == 5
	})
	pub.mu.Lock()
	k, m := slices.Clone(pub.acked["k"]), slices.Clone(pub.acked["m"])
	pub.mu.Unlock()
	if fmt.Sprint(k) != "[1 2]" || fmt.Sprint(m) != "[0 1 2]" {
		t.Fatalf("delivered k %v and m %v; want k's events after the dead one, and all of m's", k, m)
	}
}

// ctxPublisher waits for the message's context to end, as a publisher
// that honours it does at shutdown, and returns its error.
type ctxPublisher struct{ started chan struct{} }

func (p ctxPublisher) Publish(_ string, msgs ...*message.Message) error {
	select {
	case p.started <- struct{}{}:
	default:
	}
	<-msgs[0].Context().Done()
	return msgs[0].Context().Err()
}

func (ctxPublisher) Close() error { return nil }

// A publisher that gives up on the context cancelled at shutdown did not
// fail the event: the relay gives it back with its attempts unchanged.
func TestShutdownCountsNoAttempt(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.write(t, 2, "k", "m")
	pub := ctxPublisher{started: make(chan struct{}, 1)}
	r := b.newRelayWith(t, pub, fastConfig(b))
	stop := start(t, r)
	<-pub.started
	stop()
	if n := b.count(t, `SELECT count(*) FROM outbox WHERE attempts > 0 OR lease_owner IS NOT NULL OR state <> 'pending'`); n != 0 {
		t.Fatalf("%d rows counted an attempt or stayed claimed after a clean shutdown", n)
	}
}

func TestIsPermanent(t *testing.T) {
	t.Parallel()
	base := errors.New("too large")
	for _, c := range []struct {
		err  error
		want bool
	}{
		{base, false},
		{Permanent(base), true},
		{fmt.Errorf("publish event: %w", Permanent(base)), true},
		{errors.Join(errors.New("other"), Permanent(base)), true},
		{markedError{true}, true},
		{fmt.Errorf("wrapped: %w", markedError{false}), false},
		{context.DeadlineExceeded, false},
		{nil, false},
	} {
		if got := IsPermanent(c.err); got != c.want {
			t.Errorf("IsPermanent(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if Permanent(nil) != nil {
		t.Error("Permanent(nil) is not nil")
	}
	if !errors.Is(Permanent(base), base) {
		t.Error("Permanent does not wrap its error")
	}
}

type markedError struct{ permanent bool }

func (markedError) Error() string     { return "marked" }
func (e markedError) Permanent() bool { return e.permanent }

// hungPublisher never returns from Publish until released; it then
// acknowledges.
type hungPublisher struct {
	calls   chan struct{} // a publish began (the first of them is sure to tell)
	release chan struct{} // closed to let every publish through
}

func newHungPublisher() *hungPublisher {
	return &hungPublisher{calls: make(chan struct{}, 1), release: make(chan struct{})}
}

func (p *hungPublisher) Publish(string, ...*message.Message) error {
	select {
	case p.calls <- struct{}{}:
	default:
	}
	<-p.release
	return nil
}

func (*hungPublisher) Close() error { return nil }

// A publish that never returns: after PublishTimeout its event counts as
// failed (retried, not dead), the relay reports itself stalled and gives up
// its shards, a peer publishes everything in order, and the stalled relay
// joins again once its publisher answers. Run returns meanwhile.
func TestHungPublishGivesTheShardsUp(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.write(t, 3, "k", "m")
	hung := newHungPublisher()
	cfg := fastConfig(b)
	cfg.PublishTimeout = 200 * time.Millisecond
	r1 := b.newRelayWith(t, hung, cfg)
	stop1 := start(t, r1)
	<-hung.calls
	testkit.WaitFor(t, 10*time.Second, "the relay to report itself stalled and give its shards up", func() bool {
		h := r1.Health()
		return h.Stalled && !h.Heartbeating && h.Shards == 0 &&
			b.count(t, `SELECT count(*) FROM outbox_shards WHERE owner IS NOT NULL`) == 0 &&
			b.count(t, `SELECT count(*) FROM outbox_relays`) == 0
	})
	if n := b.count(t, `SELECT count(*) FROM outbox WHERE attempts > 0 AND state = 'pending' AND last_error LIKE '%PublishTimeout%'`); n == 0 {
		t.Fatal("no event recorded as failed by the publish deadline")
	}

	pub := newOutagePublisher(nil)
	cfg2 := cfg
	cfg2.ID = "r2"
	r2 := b.newRelayWith(t, pub, cfg2)
	start(t, r2)
	b.waitPublished(t, 20*time.Second, 6)
	pub.checkOrder(t, 3, "k", "m")
	if n := b.count(t, `SELECT count(*) FROM outbox WHERE state = 'dead'`); n != 0 {
		t.Fatalf("%d events dead", n)
	}

	close(hung.release)
	testkit.WaitFor(t, 10*time.Second, "the relay to join again", func() bool {
		h := r1.Health()
		return !h.Stalled && h.Heartbeating
	})
	stop1()
}

// Shutdown does not wait for a hung publish longer than PublishTimeout, and
// counts no attempt for it.
func TestShutdownDuringAHungPublish(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.write(t, 1, "k")
	hung := newHungPublisher()
	t.Cleanup(func() { close(hung.release) })
	cfg := fastConfig(b)
	cfg.PublishTimeout = 500 * time.Millisecond
	r := b.newRelayWith(t, hung, cfg)
	stop := start(t, r)
	<-hung.calls
	begun := time.Now()
	stop()
	if took := time.Since(begun); took > 10*time.Second {
		t.Fatalf("shutdown took %s with a hung publish", took)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox WHERE attempts > 0 OR lease_owner IS NOT NULL`); n != 0 {
		t.Fatalf("%d rows counted an attempt or stayed claimed", n)
	}
}
