package relay

// Tests of faults found by an adversarial review of the ordering rewrite:
// an operator committing inside a claim, a relay standing by behind a dead
// twin, error texts PostgreSQL refuses, a hot aggregate, a reused Relay and
// a frozen registration. Each failed before its fix.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin"
)

// gateRelays replaces the test schema's relays table by a view over it that
// waits on an advisory lock while a session holds it. Claim reads the relays
// table (its "live" CTE) after its snapshot was taken and before it locks
// its candidates, so a test can run a transaction inside a claim statement.
// The gate starts closed; see closeGate.
func gateRelays(t *testing.T, b *internalBundle) (waitBlocked func(), open func()) {
	t.Helper()
	b.exec(t, `ALTER TABLE outbox_relays RENAME TO outbox_relays_t`)
	b.exec(t, `CREATE FUNCTION review_gate() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$ BEGIN RETURN true; END $$`)
	b.exec(t, `CREATE VIEW outbox_relays AS SELECT * FROM outbox_relays_t WHERE review_gate()`)
	return closeGate(t, b)
}

// closeGate makes the gated view wait on a fresh advisory lock key, held by
// a session of its own until open is called. waitBlocked returns once a
// statement waits at the gate.
func closeGate(t *testing.T, b *internalBundle) (waitBlocked func(), open func()) {
	t.Helper()
	key := rand.Int64N(1 << 40)
	b.exec(t, fmt.Sprintf(`CREATE OR REPLACE FUNCTION review_gate() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN PERFORM pg_advisory_xact_lock_shared(%d); RETURN true; END $$`, key))
	conn, err := b.db.SQL.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(context.Background(), `SELECT pg_advisory_lock($1)`, key); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	open = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, key); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(open)
	waitBlocked = func() { waitForLockWaits(t, b, "advisory", 1) }
	return waitBlocked, open
}

// An operator's retry of a dead row while a claim runs: the claim's
// snapshot still shows the row dead, so if the retry could commit inside the
// claim, the claim would take the aggregate's later rows ahead of the
// retried one. Retry holds claims back instead (the claim gate): it waits
// for the claim to end, and reports the rows that claim took as Overtaken;
// claims after it take the retried row first.
func TestRetryHoldsClaimsBackWhileItCommits(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.write(t, 3, "k") // rows 1 2 3
	r := b.newRelay(t, "r1")
	b.exec(t, `UPDATE outbox SET state = 'dead', attempts = 10, last_error = 'boom' WHERE id = 1`)
	_, open := gateRelays(t, b)
	open() // registration and shard assignment read the relays table too
	ready(t, r)
	waitBlocked, open2 := closeGate(t, b) // closed again, for the claim

	type result struct {
		ids string
		err error
	}
	claimed := make(chan result, 1)
	go func() {
		rows, err := r.claimer.claim(context.Background(), 100)
		claimed <- result{idsOf(rows), err}
	}()
	waitBlocked() // the claim statement runs: its snapshot is taken, row 1 dead in it

	adm, err := outboxadmin.New(b.db.SQL, outboxadmin.Config{Table: b.db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	type retryResult struct {
		retried []outboxadmin.Retried
		err     error
	}
	retried := make(chan retryResult, 1)
	go func() {
		rt, err := adm.Retry(context.Background(), outboxadmin.Filter{IDs: []int64{1}}, false)
		retried <- retryResult{rt, err}
	}()
	waitForLockWaits(t, b, "advisory", 2) // the claim at the gate, and the retry behind the claim
	open2()
	res := <-claimed
	if res.err != nil {
		t.Fatal(res.err)
	}
	rt := <-retried
	if rt.err != nil {
		t.Fatal(rt.err)
	}
	// The claim ran before the retry: row 1 was dead, so 2 and 3 went, and
	// the retry says so.
	if res.ids != "2 3" || len(rt.retried) != 1 || fmt.Sprint(rt.retried[0].Overtaken) != "[2 3]" {
		t.Fatalf("claim took %q, retry reported %+v; want 2 3 claimed and reported as overtaken", res.ids, rt.retried)
	}
	// Serially: a retry before a claim puts the retried row first.
	b.write(t, 2, "k") // rows 4 5
	b.exec(t, `UPDATE outbox SET state = 'dead', attempts = 10 WHERE id = 1`)
	if _, err := adm.Retry(context.Background(), outboxadmin.Filter{IDs: []int64{1}}, false); err != nil {
		t.Fatal(err)
	}
	if got := claimIDs(t, r); got != "1 4 5" {
		t.Fatalf("claimed %q after the retry, want 1 4 5", got)
	}
}

// waitForLockWaits waits until n sessions of the test database wait for a
// lock of locktype.
func waitForLockWaits(t *testing.T, b *internalBundle, locktype string, n int) {
	t.Helper()
	var waiting int
	if !testkit.Eventually(10*time.Second, func() bool {
		if err := b.db.SQL.QueryRow(`SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			WHERE l.locktype = $1 AND NOT l.granted AND d.datname = current_database()`, locktype).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting >= n
	}) {
		t.Fatalf("%d sessions wait for a %s lock, want %d", waiting, locktype, n)
	}
}

// A relay standing by behind another incarnation of its name registers anew
// once that one's heartbeat is stale, even with no peer to declare it dead:
// the replacing process may have been killed for good.
func TestStandByEndsWhenTheOtherIncarnationIsStale(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	ctx := context.Background()
	b.write(t, 1, "k")
	r := b.readyRelay(t, "r1")
	// The replacing process registers under the same id, then dies
	// (SIGKILL): its row stays, its heartbeat goes stale.
	b.registered(t, "r1")
	b.exec(t, `UPDATE outbox_relays SET heartbeat_at = now() - interval '1 hour'`)
	for i := range 5 {
		_, err := r.members.round(ctx)
		if err == nil {
			if got := claimIDs(t, r); got != "1" {
				t.Fatalf("claimed %q after registering anew, want 1", got)
			}
			return
		}
		if !errors.Is(err, errStandingBy) {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	t.Fatalf("relay r1 still stands by after 5 rounds behind an incarnation of its name whose heartbeat is an hour old (relays: %v); "+
		"with no peer to forget it, nothing is ever published", b.relayIDs(t))
}

// A publisher's error text with a NUL byte (or invalid UTF-8, or a long text
// cut inside a character) cannot be stored as it is; recorded as it came,
// it would fail every flush after it and stop all bookkeeping.
func TestErrorTextIsStorable(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	r, rows := claimOne(t, b)
	c := newCompleter(r.completerDeps())
	c.fail(rows[0], errors.New("broker said: \x00 \xff "+strings.Repeat("é", maxErrorText)), func(uint64) {})
	if err := c.flush(context.Background(), nil, c.fails, nil); err != nil {
		t.Fatalf("recording the failure: %v", err)
	}
	var lastErr string
	if err := b.db.SQL.QueryRow(`SELECT last_error FROM outbox WHERE id = 1`).Scan(&lastErr); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(lastErr, "broker said:  \uFFFD é") || len(lastErr) > maxErrorText {
		t.Fatalf("last_error = %.40q… (%d bytes)", lastErr, len(lastErr))
	}
}

// The same, end to end: an event whose publish fails with a NUL in the error
// does not stop the relay from recording the rest.
func TestNULInPublishErrorDoesNotStallTheRelay(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.write(t, 1, "k")
	pub := &switchPublisher{fail: errors.New("broker said: \x00")}
	r := b.newRelayWith(t, pub, Config{Table: b.db.Table(), ID: "r1", Logger: slog.New(slog.DiscardHandler),
		PollInterval: 20 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, StaleAfter: time.Second,
		LeaseDuration: 2 * time.Second, BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	start(t, r)
	testkit.WaitFor(t, 10*time.Second, "the failed publish to be recorded", func() bool {
		var failed bool
		err := b.db.SQL.QueryRow(`SELECT last_error IS NOT NULL FROM outbox WHERE id = 1`).Scan(&failed)
		return err == nil && failed
	})
	pub.ok()
	b.write(t, 1, "m") // row 2, another aggregate, publishes fine
	if b.eventuallyPublished(t, 5*time.Second, 2) {
		return
	}
	var states string
	_ = b.db.SQL.QueryRow(`SELECT string_agg(id || ':' || state, ' ' ORDER BY id) FROM outbox`).Scan(&states)
	t.Fatalf("after one publish failed with a NUL byte in its error, nothing is recorded any more: rows %s 5s later", states)
}

type switchPublisher struct {
	mu   sync.Mutex
	fail error
}

func (p *switchPublisher) ok() { p.mu.Lock(); p.fail = nil; p.mu.Unlock() }
func (p *switchPublisher) Publish(string, ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fail
}
func (*switchPublisher) Close() error { return nil }

// The blocker runs once per aggregate, not once per candidate: a batch of
// one hot aggregate's rows must not cost the square of the batch (seconds,
// then past StatementTimeout every claim fails).
func TestClaimOfOneHotAggregateIsNotQuadratic(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	for range 3 {
		b.write(t, 1000, "hot")
	}
	b.exec(t, `ANALYZE outbox`)
	r := b.readyRelay(t, "r1")
	start := time.Now()
	rows, err := r.claimer.claim(context.Background(), 1000)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("claim of 1000 rows of one aggregate failed after %s: %v", took, err)
	}
	if len(rows) != 1000 {
		t.Fatalf("claimed %d rows, want 1000", len(rows))
	}
	// The next batch, claimed while the first is in flight (MaxInFlight is
	// 2 × BatchSize): every walk also skips the 1000 rows the relay holds.
	start = time.Now()
	rows2, err := r.claimer.claim(context.Background(), 1000)
	took2 := time.Since(start)
	t.Logf("first batch %s, second batch (first one in flight) %s, %d rows, err %v", took, took2, len(rows2), err)
	if took > time.Second || took2 > time.Second {
		t.Fatalf("claiming 1000 rows of one aggregate took %s, the next 1000 %s (the claim before this change: tens of ms)", took, took2)
	}
}

// When the completer gives up at shutdown (the database unreachable or the
// rows locked for five attempts), the rows it could not record are the
// ended incarnation's; a second Run of the same Relay starts with nothing in
// flight, or with MaxInFlight used up it would never claim again.
func TestSecondRunStartsWithNothingInFlight(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.write(t, 1, "k")
	pub := newHungPublisher()
	r := b.newRelayWith(t, pub, Config{Table: b.db.Table(), ID: "r1", Logger: slog.New(slog.DiscardHandler),
		BatchSize: 1, MaxInFlight: 1, PollInterval: 20 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond,
		StaleAfter: time.Second, LeaseDuration: 2 * time.Second, StatementTimeout: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-pub.calls
	// An operator (or anything) holds the row while the relay shuts down:
	// the mark cannot be recorded within five attempts.
	tx, err := b.db.SQL.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`SELECT 1 FROM outbox WHERE id = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	cancel()
	close(pub.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback()
	if n := r.budget.rows.Load(); n == 0 {
		t.Fatal("the completer recorded the outcome although the row was locked: the scenario (a Run that gives up with rows unrecorded) was not reached")
	}
	b.write(t, 1, "m") // row 2
	start(t, r)
	if b.eventuallyPublished(t, 4*time.Second, 2) {
		return
	}
	t.Fatalf("the second Run published nothing in 4s: in-flight %d inherited from the first Run (MaxInFlight 1)", r.budget.rows.Load())
}

// A relay restarted under its id while its predecessor's heartbeat is
// stale, frozen between deleting the predecessor's row and committing,
// holds that row locked. Peers' ForgetStaleRelays must skip it, not wait on
// it: a failed round claims from no shard, so waiting would stop the whole
// fleet. A plain transaction running the same statements stands in for the
// frozen registration.
func TestFrozenRegistrationDoesNotStopPeers(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.exec(t, `INSERT INTO outbox_relays (id, name, heartbeat_at) VALUES ('r9#old', 'r9', now() - interval '1 hour')`)
	// A round that waited on the frozen row would wait until the
	// statement timeout, every round; the timeout only has to be long
	// enough for a round on a loaded CI machine (500ms was not).
	peer := b.newRelayWith(t, nopPublisher{}, Config{Table: b.db.Table(), ID: "r1", Logger: slog.New(slog.DiscardHandler),
		StatementTimeout: 2 * time.Second})
	frozen, err := b.db.SQL.Begin() // r9 restarting: register's transaction, frozen before COMMIT
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Rollback() //nolint:errcheck
	if _, err := frozen.Exec(`INSERT INTO outbox_relays (id, name) VALUES ('r9#new', 'r9')`); err != nil {
		t.Fatal(err)
	}
	if _, err := frozen.Exec(`DELETE FROM outbox_relays WHERE name = 'r9' AND id <> 'r9#new'`); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := peer.members.round(context.Background()); err != nil {
			if i == 2 {
				_, shards := peer.members.claimable()
				t.Fatalf("peer's rounds keep failing behind the frozen registration (%v); it claims from %d shards", err, len(shards))
			}
			continue
		}
		return
	}
}
