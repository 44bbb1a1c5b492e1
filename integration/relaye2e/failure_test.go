package relaye2e

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
	"github.com/txoutbox/txoutbox/relay/relaytest"
)

// flakyPublisher fails the first failures publishes of chosen aggregates and
// records what it was asked to publish, in order, before passing it on to
// the broker. With no broker (next is nil) it acknowledges what it does not
// fail: a relay may attempt an event again when its failure could not be
// recorded (its lease ended meanwhile), so a test cannot count on one
// attempt.
type flakyPublisher struct {
	next     message.Publisher
	mu       sync.Mutex
	failLeft map[string]int // aggregate id → failures left
	attempts []string       // aggregate:seq of every attempt
}

func (p *flakyPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		agg := m.Metadata.Get(txoutbox.HeaderAggregateID)
		p.mu.Lock()
		p.attempts = append(p.attempts, agg)
		fail := p.failLeft[agg] > 0
		if fail {
			p.failLeft[agg]--
		}
		p.mu.Unlock()
		if fail {
			return errors.New("broker said no")
		}
	}
	if p.next == nil {
		return nil
	}
	return p.next.Publish(topic, msgs...)
}

func (p *flakyPublisher) Close() error { return nil }

func TestFailedEventHoldsBackOnlyItsAggregate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// agg-0 fails until the test says otherwise.
	pub := &flakyPublisher{next: b.kafkaPublisher(t, kafkapub.Config{}), failLeft: map[string]int{"agg-0": 1 << 30}}
	want := b.write(t, "orders", 400, 8)
	cfg := b.fastConfig()
	cfg.BatchSize = 20 // many claims while agg-0 backs off
	cfg.MaxAttempts = 1000
	runRelay(t, b.db, pub, cfg)

	// Every other aggregate drains while agg-0 keeps failing.
	var others []written
	for _, w := range want {
		if w.aggregate != "agg-0" {
			others = append(others, w)
		}
	}
	check(t, others, consume(t, b.brokers, "orders", len(others), 60*time.Second))
	waitFor(t, 10*time.Second, "agg-0's first event to back off", func() bool {
		return count(t, b.db, `SELECT count(*) FROM outbox WHERE aggregate_id = 'agg-0' AND attempts >= 2 AND last_error LIKE '%broker said no%'`) == 1
	})
	// Only agg-0's first event was ever attempted: the fence held back
	// the rest of its aggregate.
	if n := count(t, b.db, `SELECT count(*) FROM outbox WHERE aggregate_id = 'agg-0' AND attempts > 0`); n != 1 {
		t.Fatalf("%d agg-0 events have failed attempts; only its first should", n)
	}
	requireNone(t, b.db, `SELECT count(*) FROM outbox WHERE aggregate_id = 'agg-0' AND state = 'published'`, "agg-0 events published past the failing first one")

	// The broker recovers: agg-0 follows, in order.
	pub.mu.Lock()
	pub.failLeft["agg-0"] = 0
	pub.mu.Unlock()
	check(t, want, consume(t, b.brokers, "orders", len(want), 60*time.Second))
}

func TestPoisonEventGoesDeadOthersFlow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Records over 2 KB are refused by the producer, like an oversize
	// message a real broker refuses.
	pub := b.kafkaPublisher(t, kafkapub.Config{MaxMessageBytes: 2048})
	ctx := context.Background()
	want := b.write(t, "orders", 200, 10)
	big, _ := txoutbox.NewEvent("orders", "order", "poison", "order.huge", strings.Repeat("x", 10_000))
	after, _ := txoutbox.NewEvent("orders", "order", "poison", "order.after", map[string]int{"seq": 1})
	testkit.Commit(t, ctx, b.db.SQL, b.writer, big, after)
	cfg := b.fastConfig()
	cfg.MaxAttempts = 3
	runRelay(t, b.db, pub, cfg)

	want = append(want, written{id: after.ID.String(), aggregate: "poison", seq: 1_000_000})
	got := consume(t, b.brokers, "orders", len(want), 60*time.Second)
	check(t, want, got)
	var state, lastErr string
	var attempts int
	if err := b.db.SQL.QueryRow(`SELECT state, attempts, last_error FROM outbox WHERE event_id = $1`, big.ID.String()).
		Scan(&state, &attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if state != "dead" || attempts != 3 || !strings.Contains(lastErr, "larger than configured Producer.MaxMessageBytes") {
		t.Fatalf("poison event: state=%s attempts=%d last_error=%q; want dead after 3 attempts with the size error", state, attempts, lastErr)
	}
	for _, d := range got {
		if d.eventID == big.ID.String() {
			t.Fatal("the poison event reached the broker")
		}
	}
}

func TestNoTransactionOpenWhilePublishing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := relaytest.NewPublisher()
	var calls atomic.Int64
	pub.OnPublish(func(string, *message.Message) {
		calls.Add(1)
		time.Sleep(2 * time.Second) // about time: a publish that lasts
	})
	b.write(t, "orders", 20, 20)
	// Tag the relay's connections so other tests' backends do not count.
	appName := "relay_" + b.db.Schema
	relayDB := testkitReopen(t, b.db.URL+"&application_name="+appName)
	runRelay(t, &testkit.DB{SQL: relayDB, URL: b.db.URL, Schema: b.db.Schema}, pub, b.fastConfig())
	waitFor(t, 10*time.Second, "publishing to start", func() bool { return calls.Load() > 0 })
	// While the first publishes sleep (2s each), no backend of the relay
	// may hold a transaction open for as long as a publish: one begun
	// before the publish started is over a second old within its second
	// half. The bound leaves a claim or mark on a loaded machine its time.
	waitFor(t, 20*time.Second, "the first publishes marked", func() bool {
		n := count(t, b.db, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1
			  AND xact_start < now() - interval '1 second'`, appName)
		if n != 0 {
			t.Fatalf("%d backends hold a transaction while events publish", n)
		}
		return count(t, b.db, "SELECT count(*) FROM outbox WHERE state = 'published'") > 0
	})
	waitFor(t, 20*time.Second, "all published", func() bool {
		return count(t, b.db, "SELECT count(*) FROM outbox WHERE state = 'published'") == 20
	})
}

// hangingPublisher answers no publish until the relay's context for it
// ends, then refuses it, as a broker that never answers before the
// connection resets; started is closed at the first publish.
func hangingPublisher() (pub *relaytest.Publisher, started <-chan struct{}) {
	pub = relaytest.NewPublisher()
	pub.Fail(relaytest.Failure{Err: errors.New("connection reset before the broker answered")})
	s := make(chan struct{})
	var once sync.Once
	pub.OnPublish(func(_ string, m *message.Message) {
		once.Do(func() { close(s) })
		<-m.Context().Done()
	})
	return pub, s
}

func TestUnacknowledgedEventsAreNeverMarked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, "orders", 50, 5)
	pub, started := hangingPublisher()
	_, stop := runRelay(t, b.db, pub, b.fastConfig())
	<-started
	if n := count(t, b.db, "SELECT count(*) FROM outbox WHERE lease_owner IS NOT NULL"); n == 0 {
		t.Fatal("nothing claimed while publishing")
	}
	// Shut down while publishes hang: they fail once the relay stops.
	stop()
	requireNone(t, b.db, "SELECT count(*) FROM outbox WHERE state = 'published'", "unacknowledged events marked published")
	requireNone(t, b.db, "SELECT count(*) FROM outbox WHERE lease_owner IS NOT NULL", "rows left claimed after a clean shutdown; they should be released or failed")
}

func TestFailoverAfterRelayDiesWithoutCleanup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := b.write(t, "orders", 300, 10)

	// Relay A claims rows and then loses its database for good: its
	// claims and shards stay behind, as after kill -9.
	deadDB := testkitReopen(t, b.db.URL)
	hang, started := hangingPublisher()
	cfgA := b.fastConfig()
	cfgA.ID = "relay-a"
	a, err := relay.New(deadDB, hang, cfgA)
	if err != nil {
		t.Fatal(err)
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	doneA := make(chan struct{})
	go func() { a.Run(ctxA); close(doneA) }()
	<-started
	deadDB.Close() // every later query of A fails: no cleanup is possible
	t.Cleanup(func() { cancelA(); <-doneA })
	claimedByA := count(t, b.db, "SELECT count(*) FROM outbox WHERE lease_owner LIKE 'relay-a#%'")
	if claimedByA == 0 {
		t.Fatal("relay A claimed nothing")
	}

	// Relay B declares A dead after StaleAfter and publishes everything,
	// A's claims included, in order.
	cfgB := b.fastConfig()
	cfgB.ID = "relay-b"
	runRelay(t, b.db, b.kafkaPublisher(t, kafkapub.Config{}), cfgB)
	got := consume(t, b.brokers, "orders", len(want), 60*time.Second)
	check(t, want, got)
	waitFor(t, 10*time.Second, "all rows published", func() bool {
		return count(t, b.db, "SELECT count(*) FROM outbox WHERE state = 'published'") == len(want)
	})
}

// gatedPublisher holds every publish until the gate opens, then passes it on.
type gatedPublisher struct {
	next    message.Publisher
	gate    chan struct{}
	started chan struct{}
	once    sync.Once
}

func (p *gatedPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.once.Do(func() { close(p.started) })
	<-p.gate
	return p.next.Publish(topic, msgs...)
}
func (p *gatedPublisher) Close() error { return nil }

// When shards move to a relay that joins, the previous owner's in-flight
// events are published before the new owner publishes anything later of
// the same aggregates.
func TestShardHandoverWaitsForThePreviousOwner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	kafka := b.kafkaPublisher(t, kafkapub.Config{})
	want := b.write(t, "orders", 200, 40) // rows 1-40 are each aggregate's first

	gated := &gatedPublisher{next: kafka, gate: make(chan struct{}), started: make(chan struct{})}
	cfgA := b.fastConfig()
	cfgA.ID, cfgA.BatchSize, cfgA.LeaseDuration = "relay-a", 40, time.Minute
	_, stopA := runRelay(t, b.db, gated, cfgA)
	var open sync.Once
	openGate := func() { open.Do(func() { close(gated.gate) }) }
	t.Cleanup(openGate) // before stopA's cleanup runs, on failure too
	<-gated.started     // A holds the first row of every aggregate in flight

	cfgB := b.fastConfig()
	cfgB.ID, cfgB.LeaseDuration = "relay-b", time.Minute
	poolB, statementsB := b.db.Traced(t)
	runRelay(t, &testkit.DB{SQL: poolB, URL: b.db.URL, Schema: b.db.Schema}, kafka, cfgB)
	waitFor(t, 10*time.Second, "relay-b to own shards", func() bool {
		return count(t, b.db, "SELECT count(*) FROM outbox_shards WHERE owner LIKE 'relay-b#%'") > 0
	})
	owns := time.Now()
	waitFor(t, 10*time.Second, "relay-b to run three claims on its shards", func() bool {
		return len(statementsB.Matching(claimSQL, owns)) >= 3
	})
	if n := count(t, b.db, "SELECT count(*) FROM outbox WHERE lease_owner LIKE 'relay-b#%' OR state = 'published'"); n != 0 {
		t.Fatalf("relay-b claimed or published %d events while the previous owner still held their aggregates' first events", n)
	}
	openGate()
	check(t, want, consume(t, b.brokers, "orders", len(want), 60*time.Second))
	stopA()
}
