package relay

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// The tests in this file drive the claim statement directly: each sets up
// rows in the states a fault leaves behind and checks what one claim takes.

type internalBundle struct {
	db *testkit.DB
	w  *txoutbox.Writer
}

func setupInternal(t *testing.T) *internalBundle {
	t.Helper()
	db := testkit.NewOutbox(t)
	return &internalBundle{db: db, w: testkit.NewWriter(t, db.Table())}
}

// setupKM is the claim tests' common start: aggregates k and m with three
// rows each, written interleaved (k: 1 3 5, m: 2 4 6), and relay r1,
// registered and owning every shard.
func setupKM(t *testing.T) (*internalBundle, *Relay) {
	t.Helper()
	return setupReady(t, 3, "k", "m")
}

// setupReady writes n events of each aggregate of aggs, as write does, and
// readies relay r1.
func setupReady(t *testing.T, n int, aggs ...string) (*internalBundle, *Relay) {
	t.Helper()
	b := setupInternal(t)
	b.write(t, n, aggs...)
	return b, b.readyRelay(t, "r1")
}

// newRelay is relay id of the default configuration, publishing nothing.
func (b *internalBundle) newRelay(t *testing.T, id string) *Relay {
	t.Helper()
	return b.newRelayWith(t, nopPublisher{}, Config{Table: b.db.Table(), ID: id, Logger: slog.New(slog.DiscardHandler)})
}

// newRelayWith is New on the test's database, which must succeed.
func (b *internalBundle) newRelayWith(t *testing.T, pub message.Publisher, cfg Config) *Relay {
	t.Helper()
	r, err := New(b.db.SQL, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// registered is newRelay after one membership round.
func (b *internalBundle) registered(t *testing.T, id string) *Relay {
	t.Helper()
	r := b.newRelay(t, id)
	round(t, r)
	return r
}

// readyRelay is newRelay, registered and owning every shard.
func (b *internalBundle) readyRelay(t *testing.T, id string) *Relay {
	t.Helper()
	r := b.newRelay(t, id)
	ready(t, r)
	return r
}

// lock holds the rows query selects FOR UPDATE in a transaction of its
// own, as an operator's retry or a frozen session would, until release is
// called or the test ends.
func (b *internalBundle) lock(t *testing.T, query string) (release func()) {
	t.Helper()
	tx, err := b.db.SQL.Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	if _, err := tx.Exec(query); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
}

// write commits n events of each aggregate, aggregates interleaved: rows
// 1..n*len(aggs) in id order.
func (b *internalBundle) write(t *testing.T, n int, aggs ...string) {
	t.Helper()
	var events []txoutbox.Event
	for i := range n {
		for _, agg := range aggs {
			e, err := txoutbox.NewEvent("orders", "order", agg, "order.changed", i)
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, e)
		}
	}
	b.commit(t, events...)
}

// commit writes events in one transaction.
func (b *internalBundle) commit(t *testing.T, events ...txoutbox.Event) {
	t.Helper()
	testkit.Commit(t, context.Background(), b.db.SQL, b.w, events...)
}

func (b *internalBundle) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := b.db.SQL.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func (b *internalBundle) relayIDs(t *testing.T) []string {
	t.Helper()
	rows, err := b.db.SQL.Query(`SELECT id FROM outbox_relays ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := scanStrings(rows)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// round runs one membership round of r, which must succeed.
func round(t *testing.T, r *Relay) {
	t.Helper()
	if _, err := r.members.round(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// ready registers r and gives it every shard.
func ready(t *testing.T, r *Relay) {
	t.Helper()
	round(t, r)
	if _, shards := r.members.claimable(); len(shards) != numShards {
		t.Fatalf("relay claims from %d shards, want %d", len(shards), numShards)
	}
}

func claimIDs(t *testing.T, r *Relay) string {
	t.Helper()
	return claimUpTo(t, r, 100)
}

// claimUpTo claims at most limit rows and returns their ids.
func claimUpTo(t *testing.T, r *Relay, limit int) string {
	t.Helper()
	rows, err := r.claimer.claim(context.Background(), limit)
	if err != nil {
		t.Fatal(err)
	}
	return idsOf(rows)
}

// idsOf lists the ids of rows, space-separated.
func idsOf(rows []*claimedRow) string {
	ids := make([]string, len(rows))
	for i, row := range rows {
		ids[i] = fmt.Sprint(row.id)
	}
	return strings.Join(ids, " ")
}

// claimOne writes one event, readies relay r1 and claims it: the state a
// test of what happens to one claimed row starts from.
func claimOne(t *testing.T, b *internalBundle) (*Relay, []*claimedRow) {
	t.Helper()
	b.write(t, 1, "k")
	r := b.readyRelay(t, "r1")
	rows, err := r.claimer.claim(context.Background(), 10)
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim: %v, %d rows", err, len(rows))
	}
	return r, rows
}

// A claim whose commit reply was lost leaves rows claimed that no lane
// publishes. The next claim releases them first, so they are published in
// order instead of after a lease expiry, behind later events.
func TestClaimAfterUnconfirmedCommitReleasesItsRows(t *testing.T) {
	t.Parallel()
	b, r := setupReady(t, 6, "k")
	inc := r.members.cur.Load()
	// The lost claim: rows 1-3 claimed by r1, whose commit reply never came.
	b.exec(t, `UPDATE outbox SET state = 'claimed', lease_owner = $1, lease_expires_at = now() + interval '1 hour' WHERE id <= 3`, inc.token)
	r.claimer.unconfirmed = []*claimedRow{{id: 1, inc: inc}, {id: 2, inc: inc}, {id: 3, inc: inc}}
	if got := claimIDs(t, r); got != "1 2 3 4 5 6" {
		t.Fatalf("claimed rows %q, want 1 2 3 4 5 6: the unconfirmed claim's rows first, in order", got)
	}
	if len(r.claimer.unconfirmed) != 0 {
		t.Fatal("unconfirmed rows kept after releasing them")
	}
}

// Restart under the same id: the earlier incarnation's rows, still under
// lease, are claimed again first, never skipped for the later ones.
func TestClaimAfterSameIDRestartTakesEarlierRowsFirst(t *testing.T) {
	t.Parallel()
	b, first := setupKM(t)
	if got := claimIDs(t, first); got != "1 2 3 4 5 6" {
		t.Fatalf("first run claimed %q", got)
	}
	b.write(t, 2, "k", "m") // rows 7-10
	second := b.readyRelay(t, "r1")
	if got := claimIDs(t, second); got != "1 2 3 4 5 6 7 8 9 10" {
		t.Fatalf("restarted relay claimed %q, want 1..10: the earlier run's rows again, then the new ones", got)
	}
}

// Rows another live incarnation holds under a valid lease hold back the
// later rows of their aggregates; other aggregates flow.
func TestClaimWaitsForRowsAnotherRelayHolds(t *testing.T) {
	t.Parallel()
	b, r := setupKM(t) // k: 1 3 5, m: 2 4 6
	b.exec(t, `INSERT INTO outbox_relays (id, name) VALUES ('r2#x', 'r2')`)
	b.exec(t, `UPDATE outbox SET state = 'claimed', lease_owner = 'r2#x', lease_expires_at = now() + interval '1 hour' WHERE id = 1`)
	if got := claimIDs(t, r); got != "2 4 6" {
		t.Fatalf("claimed %q, want only m's rows 2 4 6 while r2 holds k's row 1", got)
	}
	// Once r2's lease expired, k's rows go, the held one first.
	b.exec(t, `UPDATE outbox SET lease_expires_at = now() - interval '1 second' WHERE id = 1`)
	if got := claimIDs(t, r); got != "1 3 5" {
		t.Fatalf("claimed %q after r2's lease expired, want 1 3 5", got)
	}
}

// SKIP LOCKED passes over a row another transaction locked (an operator's
// retry, a frozen session): the later rows of its aggregate must wait too.
func TestClaimDoesNotPassOverALockedRow(t *testing.T) {
	t.Parallel()
	b, r := setupKM(t) // k: 1 3 5, m: 2 4 6
	release := b.lock(t, `SELECT 1 FROM outbox WHERE id = 3 FOR UPDATE`)
	if got := claimIDs(t, r); got != "1 2 4 6" {
		t.Fatalf("claimed %q while row 3 is locked, want 1 2 4 6 (k's row 5 waits behind 3)", got)
	}
	release()
	if got := claimIDs(t, r); got != "3 5" {
		t.Fatalf("claimed %q after the lock went, want 3 5", got)
	}
}

// A row in retry backoff holds back its aggregate; a dead row does not.
// The row in backoff is as Fail leaves it (retry_at set), or as a relay of
// schema version 3 left it (no retry_at).
func TestClaimHoldsBackBehindBackoffNotBehindDead(t *testing.T) {
	t.Parallel()
	for _, backoff := range []string{
		`UPDATE outbox SET attempts = 1, next_attempt_at = now() + interval '1 hour', retry_at = now() + interval '1 hour' WHERE id = 1`,
		`UPDATE outbox SET attempts = 1, next_attempt_at = now() + interval '1 hour' WHERE id = 1`,
	} {
		b, r := setupReady(t, 2, "k", "m") // k: 1 3, m: 2 4
		b.exec(t, backoff)
		b.exec(t, `UPDATE outbox SET state = 'dead', attempts = 10 WHERE id = 2`)
		if got := claimIDs(t, r); got != "4" {
			t.Fatalf("%s: claimed %q, want 4: k waits behind its row in backoff, m goes on past its dead row", backoff, got)
		}
	}
}

// Rows in backoff do not fill the claim's window: with more aggregates in
// backoff at the head of the table than a claim takes (a burst of events to
// a topic the broker refused), the other aggregates still go.
func TestClaimLooksPastAggregatesInBackoff(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.write(t, 1, "a", "b", "c", "d") // 1 2 3 4
	b.write(t, 1, "e")                // 5
	r := b.readyRelay(t, "r1")
	// As Fail leaves them: retry_at is the backoff's end.
	b.exec(t, `UPDATE outbox SET attempts = 1, next_attempt_at = now() + interval '1 hour', retry_at = now() + interval '1 hour' WHERE id <= 4`)
	if got := claimUpTo(t, r, 4); got != "5" {
		t.Fatalf("claimed %q with a, b, c and d in backoff, want 5: e goes on", got)
	}
}

// Rows another incarnation claimed and that are pending again before this
// relay's claims (a lost release) are nobody's: claimed again, in order.
func TestClaimTakesRowsOfAGoneIncarnationInOrder(t *testing.T) {
	t.Parallel()
	b, r := setupReady(t, 4, "k")
	b.exec(t, `UPDATE outbox SET state = 'claimed', lease_owner = 'gone#1', lease_expires_at = now() + interval '1 hour' WHERE id IN (1, 2)`)
	if got := claimIDs(t, r); got != "1 2 3 4" {
		t.Fatalf("claimed %q, want 1 2 3 4", got)
	}
}

// A row whose headers cannot become message metadata goes dead with the
// reason in the claim that meets it; it never fails the claim, and the
// later rows of its aggregate go on (a dead row does not hold them back).
func TestClaimMakesUndecodableRowsDead(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.write(t, 3, "k")
	b.exec(t, `UPDATE outbox SET headers = '{"n": 1}' WHERE id = 2`)
	r := b.readyRelay(t, "r1")
	if got := claimIDs(t, r); got != "1 3" {
		t.Fatalf("claimed %q, want 1 3", got)
	}
	var state, lastErr string
	if err := b.db.SQL.QueryRow(`SELECT state, coalesce(last_error, '') FROM outbox WHERE id = 2`).Scan(&state, &lastErr); err != nil {
		t.Fatal(err)
	}
	if state != "dead" || !strings.Contains(lastErr, "headers") {
		t.Fatalf("undecodable row: state %s, last_error %q; want dead, naming the headers", state, lastErr)
	}
}

// A mark arriving after an operator returned the row to pending (a replay)
// must not turn it back to published.
func TestLateMarkDoesNotUndoAReplay(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	r, rows := claimOne(t, b)
	b.exec(t, `UPDATE outbox SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL WHERE id = 1`)
	c := newCompleter(r.completerDeps())
	if err := c.flush(context.Background(), rows, nil, nil); err != nil {
		t.Fatal(err)
	}
	var state string
	if err := b.db.SQL.QueryRow(`SELECT state FROM outbox WHERE id = 1`).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != "pending" {
		t.Fatalf("state %s after a late mark, want pending", state)
	}
}

// An acknowledgement marks only the version its claim took. After an
// operator's replay the same incarnation may claim the row again; a late
// mark of the earlier copy must leave that claim alone, or the replayed
// event would count as published without going out again.
func TestLateMarkDoesNotTakeTheNextClaim(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	r, first := claimOne(t, b)
	b.exec(t, `UPDATE outbox SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL, next_attempt_at = now() WHERE id = 1`)
	second, err := r.claimer.claim(context.Background(), 10)
	if err != nil || len(second) != 1 || second[0].id != 1 {
		t.Fatalf("claim after the replay: %v, %d rows", err, len(second))
	}
	if first[0].version == second[0].version {
		t.Fatalf("both claims returned version %d", first[0].version)
	}
	c := newCompleter(r.completerDeps())
	state := func() string {
		t.Helper()
		var s string
		if err := b.db.SQL.QueryRow(`SELECT state FROM outbox WHERE id = 1`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := c.flush(context.Background(), first, nil, nil); err != nil {
		t.Fatal(err)
	}
	if s := state(); s != "pending" {
		t.Fatalf("state %s after the first claim's late mark, want pending (claimed again)", s)
	}
	if err := c.flush(context.Background(), second, nil, nil); err != nil {
		t.Fatal(err)
	}
	if s := state(); s != "published" {
		t.Fatalf("state %s after the second claim's mark, want published", s)
	}
}

// The rows an incarnation holds under a live lease are the oldest of its
// shards while it drains a backlog. The claim passes over them, and takes
// the next Limit rows, whatever the relay counts in flight; a row whose
// lease ended (its mark lost in a database crash, say) it takes again, in
// order.
func TestClaimLooksPastTheRowsItHolds(t *testing.T) {
	t.Parallel()
	b, r := setupKM(t) // k: 1 3 5, m: 2 4 6
	if got := claimUpTo(t, r, 2); got != "1 2" {
		t.Fatalf("first claim took %q, want 1 2", got)
	}
	if got := claimUpTo(t, r, 2); got != "3 4" {
		t.Fatalf("with rows 1 2 held the claim took %q, want 3 4", got)
	}
	b.exec(t, `UPDATE outbox SET lease_expires_at = now() - interval '1 second' WHERE id = 1`)
	if got := claimUpTo(t, r, 2); got != "1 5" {
		t.Fatalf("with row 1's lease ended the claim took %q, want 1 5", got)
	}
}

// A prepared claim runs on a generic plan after five executions, which
// estimates every CTE at one row. Membership in the locked set must still
// be tested through a hash: a nested loop there made a 1,000-row claim
// take 90 ms instead of 15 (TestClaimAggregateTestStaysLinear covers the
// test of the rows' aggregates).
func TestClaimGenericPlanHashesMembership(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	r := b.newRelay(t, "r1")
	ctx := context.Background()
	conn, err := b.db.SQL.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{`SET plan_cache_mode = force_generic_plan`, `SET enable_sort = off`, `SET enable_bitmapscan = off`,
		`PREPARE claim AS ` + r.sql.claim} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%.40s: %v", q, err)
		}
	}
	rows, err := conn.QueryContext(ctx, `EXPLAIN EXECUTE claim('r1#x', 1000, '30 seconds', '`+outboxsql.ShardMask([]int16{1, 2})+`', 1000000, 0)`)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := scanStrings(rows)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if strings.Contains(text, "Semi Join") || strings.Count(text, "hashed SubPlan") < 3 {
		t.Fatalf("generic plan of the claim tests membership without a hash:\n%s", text)
	}
}

// Retries (rows with a retry_at) and first attempts are read apart and
// claimed together in id order per aggregate, a batch cut at its limit by
// id, and a due retry waits behind an earlier row of its aggregate in
// backoff.
func TestClaimOrdersRetriesAndFirstAttemptsOfAnAggregate(t *testing.T) {
	t.Parallel()
	t.Run("in order, cut by id", func(t *testing.T) {
		t.Parallel()
		b := setupInternal(t)
		b.write(t, 1, "a", "b", "c") // 1 2 3
		b.write(t, 1, "a", "b", "c") // 4 5 6
		b.write(t, 1, "c")           // 7
		r := b.readyRelay(t, "r1")
		// a: 1 a due retry, then 4. b: 2 in backoff, then 5. c: 3 (never
		// failed, as after a replay), 6 a due retry, then 7.
		b.exec(t, `UPDATE outbox SET attempts = 1, next_attempt_at = now() - interval '2 seconds', retry_at = now() - interval '2 seconds' WHERE id = 1`)
		b.exec(t, `UPDATE outbox SET attempts = 1, next_attempt_at = now() + interval '1 hour', retry_at = now() + interval '1 hour' WHERE id = 2`)
		b.exec(t, `UPDATE outbox SET attempts = 1, next_attempt_at = now() - interval '1 second', retry_at = now() - interval '1 second' WHERE id = 6`)
		for _, want := range []string{"1 3", "4 6", "7", ""} {
			if got := claimUpTo(t, r, 2); got != want {
				t.Fatalf("claimed %q, want %q", got, want)
			}
		}
	})
	t.Run("a due retry behind a row in backoff", func(t *testing.T) {
		t.Parallel()
		b := setupInternal(t)
		b.write(t, 2, "e") // 1 2
		b.write(t, 1, "g") // 3
		r := b.readyRelay(t, "r1")
		b.exec(t, `UPDATE outbox SET attempts = 1, next_attempt_at = now() + interval '1 hour', retry_at = now() + interval '1 hour' WHERE id = 1`)
		b.exec(t, `UPDATE outbox SET attempts = 1, next_attempt_at = now() - interval '1 second', retry_at = now() - interval '1 second' WHERE id = 2`)
		if got := claimIDs(t, r); got != "3" {
			t.Fatalf("claimed %q, want 3: e's due retry 2 waits behind 1 in backoff", got)
		}
	})
}
