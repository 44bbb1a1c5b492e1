package outboxsql_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// The tests here prove that a statement costs its batch or an index look-up,
// not the table: each runs one statement at two sizes 10x apart, under the
// custom and the generic plan, and compares the work its plan did
// (testkit.PlanWork: buffers, not time). None runs in parallel: another
// test's open snapshot keeps VACUUM from marking pages all-visible, and a
// plan then reads the heap too (each of them failed so, in turn).

// costRatio is how much more work the larger size may take: the index
// descents grow by a level at most, never by the 10x of the sizes.
const costRatio = 2

// costSmall and costLarge are the two sizes, 10x apart, affordable in CI.
const (
	costSmall = 2_000
	costLarge = 20_000
)

// costDB is a fresh outbox with its statements rendered for it.
type costDB struct {
	db    *sql.DB
	names outboxsql.Names
}

// newCostDB makes a migrated schema on the quiet cluster, held for the
// test's length: a snapshot open anywhere on a server (another package's
// tests, running beside these) keeps VACUUM from marking pages
// all-visible and page pruning from removing dead versions, and the plans
// then read more than their own work (a claim read 12,000 buffers where
// it reads 4,400).
func newCostDB(t *testing.T) costDB {
	t.Helper()
	testkit.Long(t, "the plan-work tests, one at a time on a cluster of their own")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	quiet := testkit.QuietCluster
	if err := holdQuiet(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(letQuietGo) // after the schema's drop
	url, err := quiet.Ensure(ctx)
	if err != nil {
		t.Fatalf("needs a PostgreSQL cluster of its own: %v", err)
	}
	dbURL, err := testkit.EnsureDatabase(ctx, url, "txoutbox_test_plans")
	if err != nil {
		t.Fatal(err)
	}
	s, err := testkit.CreateSchema(ctx, dbURL, testkit.SchemaName("t_"+t.Name()), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Drop(context.Background()) })
	n, err := outboxsql.NamesFor(s.Name, "")
	if err != nil {
		t.Fatal(err)
	}
	return costDB{db: s.SQL, names: n}
}

// The quiet cluster's lock is taken across processes (a flock): a test
// that makes two cost databases holds it once, and lets it go when its
// last one is dropped, so another package's test on the cluster can run
// between two of these.
var (
	quietMu     sync.Mutex
	quietUsers  int
	quietUnlock func()
)

func holdQuiet(ctx context.Context) error {
	quietMu.Lock()
	defer quietMu.Unlock()
	if quietUsers == 0 {
		unlock, err := testkit.QuietCluster.Lock(ctx) // another package's test may hold it
		if err != nil {
			return err
		}
		quietUnlock = unlock
	}
	quietUsers++
	return nil
}

func letQuietGo() {
	quietMu.Lock()
	defer quietMu.Unlock()
	if quietUsers--; quietUsers == 0 {
		quietUnlock()
	}
}

func (c costDB) exec(t *testing.T, stmt string, args ...any) {
	t.Helper()
	if _, err := c.db.Exec(c.names.Render(stmt), args...); err != nil {
		t.Fatalf("%v\n%s", err, stmt)
	}
}

// insert adds n rows of aggregates prefix1..prefixN (one row each), with the
// given state and columns as SQL expressions of g, the row's number.
func (c costDB) insert(t *testing.T, n int, aggregate, state, attempts, nextAttempt, createdAt, publishedAt string) {
	t.Helper()
	c.exec(t, `INSERT INTO {{table}} (event_id, topic, aggregate_id, event_type, payload, state, attempts,
        next_attempt_at, created_at, published_at)
    SELECT gen_random_uuid(), 'orders', `+aggregate+`, 'e', '\x7b7d', '`+state+`', `+attempts+`,
           `+nextAttempt+`, `+createdAt+`, `+publishedAt+`
    FROM generate_series(1, $1) g`, n)
}

// insertScheduled adds n rows as the writer leaves an event with a
// NotBefore of notBefore (an SQL expression), created at createdAt: in one
// insert, so no dead index entries of an update are left for the plans to
// walk where a concurrent transaction keeps VACUUM from removing them.
func (c costDB) insertScheduled(t *testing.T, n int, aggregate, notBefore, createdAt string) {
	t.Helper()
	c.exec(t, `INSERT INTO {{table}} (event_id, topic, aggregate_id, event_type, payload, next_attempt_at, retry_at, not_before, created_at)
    SELECT gen_random_uuid(), 'orders', `+aggregate+`, 'e', '\x7b7d', `+notBefore+`, `+notBefore+`, `+notBefore+`, `+createdAt+`
    FROM generate_series(1, $1) g`, n)
}

// shards runs a statement returning shard numbers and returns them sorted.
func (c costDB) shards(t *testing.T, stmt string, args ...any) []int16 {
	t.Helper()
	out := column[int16](t, c, stmt, args...)
	slices.Sort(out)
	return out
}

// column runs stmt, which returns one column, and returns its values.
func column[T any](t *testing.T, c costDB, stmt string, args ...any) []T {
	t.Helper()
	rows, err := c.db.Query(c.names.Render(stmt), args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stmt)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// settle vacuums and analyzes the table, so the plans see what production
// sees and dead index entries are not part of the work.
func (c costDB) settle(t *testing.T) {
	t.Helper()
	c.exec(t, `VACUUM ANALYZE {{table}}`)
	c.exec(t, `VACUUM ANALYZE {{relays}}`)
}

func (c costDB) work(t *testing.T, setup []string, stmt string, args ...any) map[string]testkit.Work {
	t.Helper()
	for i, s := range setup {
		setup[i] = c.names.Render(s)
	}
	return testkit.PlanWorkModes(t, c.db, setup, c.names.Render(stmt), args...)
}

// allShards lists every shard.
func allShards() []int16 {
	all := make([]int16, outboxsql.Shards)
	for i := range all {
		all[i] = int16(i)
	}
	return all
}

// claimArgs are the arguments of a claim of up to limit rows by relay
// "me", of every shard.
func claimArgs(limit int) []any {
	return outboxsql.ClaimArgs{Owner: "me", Limit: limit, Lease: time.Minute, Shards: allShards()}.Args()
}

// claimWork is the work of a claim of limit rows under its settings,
// which must claim limit rows under every plan.
func (c costDB) claimWork(t *testing.T, limit int) map[string]testkit.Work {
	t.Helper()
	w := c.work(t, []string{settings(outboxsql.ClaimSettings)}, outboxsql.Claim, claimArgs(limit)...)
	for mode, x := range w {
		if x.Rows != int64(limit) {
			t.Fatalf("%s: claimed %d rows, want %d", mode, x.Rows, limit)
		}
	}
	return w
}

// claimed runs a claim of up to limit rows and counts the rows it took.
func (c costDB) claimed(t *testing.T, limit int) int {
	t.Helper()
	rows, err := c.db.Query(c.names.Render(outboxsql.Claim), claimArgs(limit)...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	return n
}

// Pruning reads the published rows it deletes, not the dead rows kept for
// weeks ahead of them in the primary key.
func TestPruneCostIsItsBatchWithAnyNumberOfDeadRows(t *testing.T) {
	measure := func(dead int) map[string]testkit.Work {
		c := newCostDB(t)
		c.insert(t, dead, `'dead-' || g`, "dead", "10", "now()", "now() - interval '20 days'", "NULL")
		c.insert(t, 1_000, `'old-' || g`, "published", "0", "now()", "now() - interval '3 days'", "now() - interval '3 days'")
		c.insert(t, 200, `'new-' || g`, "published", "0", "now()", "now()", "now()")
		c.insert(t, 100, `'pending-' || g`, "pending", "0", "now()", "now()", "NULL")
		c.settle(t)
		return c.work(t, nil, outboxsql.Prune, outboxsql.Interval(24*time.Hour), 100)
	}
	testkit.AssertFlat(t, "prune", costRatio, measure(costSmall), measure(costLarge))
}

// settings renders a settings statement (WalkSettings, ClaimSettings) with
// a statement timeout for PlanWork's setup, and the claim gate's key of
// the table Names.Render renders it for.
func settings(stmt string) string {
	return strings.NewReplacer("{{claimkey $4}}", "{{claimkey}}", "$1", "'60000ms'", "$2", "'60000ms'", "$3", "'60000ms'").Replace(stmt)
}

// The handover check reads a claim's batch of the backlog, not all of it,
// and still finds the rows a peer holds where a claim would look first.
func TestHandoverCheckCostIsItsWindowWithAnyBacklog(t *testing.T) {
	measure := func(backlog int) map[string]testkit.Work {
		c := newCostDB(t)
		c.exec(t, `INSERT INTO {{relays}} (id, name) VALUES ('me', 'me'), ('peer', 'peer')`)
		c.insert(t, backlog, `'agg-' || g`, "pending", "0", "now()", "now()", "NULL")
		// The peer still publishes the first 20 rows.
		c.exec(t, `UPDATE {{table}} SET lease_owner = 'peer', lease_expires_at = now() + interval '1 hour',
            next_attempt_at = now() + interval '1 hour' WHERE id <= 20`)
		c.settle(t)
		want := c.shards(t, `SELECT DISTINCT shard FROM {{table}} WHERE id <= 20`)
		args := outboxsql.HandoverArgs{Owner: "me", Shards: allShards(), Window: 500}.Args()
		got := c.shards(t, outboxsql.ShardsInHandover, args...)
		if !slices.Equal(got, want) {
			t.Fatalf("shards in handover = %v, want %v (those of the peer's rows)", got, want)
		}
		return c.work(t, []string{settings(outboxsql.WalkSettings)}, outboxsql.ShardsInHandover, args...)
	}
	testkit.AssertFlat(t, "handover check", costRatio, measure(10*costSmall), measure(10*costLarge))
}

// The statements `outbox dead retry` runs holding the claim gate, and the
// aggregate look-up, read the aggregates' rows, not the backlog or the dead
// letters.
func TestRetryLookupsCostTheAggregatesWithAnyBacklog(t *testing.T) {
	measure := func(backlog int) (lock, lookup map[string]testkit.Work) {
		c := newCostDB(t)
		c.insert(t, backlog, `'dead-' || g`, "dead", "10", "now()", "now()", "NULL")
		c.insert(t, backlog, `'agg-' || g`, "pending", "0", "now()", "now()", "NULL")
		c.insert(t, 3, `'poison'`, "dead", "10", "now()", "now()", "NULL")
		c.insert(t, 5, `'poison'`, "pending", "0", "now()", "now()", "NULL")
		c.settle(t)
		lock = c.work(t, nil, outboxsql.OpsLockUnpublished, outboxsql.TextArray([]string{"poison", "agg-7"}))
		lookup = c.work(t, nil, outboxsql.OpsLookupAggregate, "poison", 100, 50)
		for mode, w := range lock {
			if w.Rows != 6 {
				t.Fatalf("lock unpublished, %s: %d rows, want the 6 unpublished rows of the two aggregates", mode, w.Rows)
			}
		}
		for mode, w := range lookup {
			if w.Rows != 8 {
				t.Fatalf("look-up, %s: %d rows, want the aggregate's 8", mode, w.Rows)
			}
		}
		return lock, lookup
	}
	smallLock, smallLookup := measure(costSmall)
	largeLock, largeLookup := measure(costLarge)
	testkit.AssertFlat(t, "retry's lock of the aggregates' unpublished rows", costRatio, smallLock, largeLock)
	testkit.AssertFlat(t, "aggregate look-up", costRatio, smallLookup, largeLookup)
}

// A replay reads the published rows it selects, not every retained one.
func TestReplaySelectCostIsTheRowsSelected(t *testing.T) {
	measure := func(retained int) map[string]testkit.Work {
		c := newCostDB(t)
		c.insert(t, retained, `'old-' || g`, "published", "0", "now()", "now() - interval '3 days'", "now() - interval '3 days'")
		c.insert(t, 200, `'new-' || g`, "published", "0", "now()", "now()", "now()")
		c.settle(t)
		w := c.work(t, nil, outboxsql.OpsReplaySelect, time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano), nil, nil)
		for mode, x := range w {
			if x.Rows != 200 {
				t.Fatalf("replay select, %s: %d rows, want the 200 published in the last hour", mode, x.Rows)
			}
		}
		return w
	}
	testkit.AssertFlat(t, "replay select", costRatio, measure(costSmall), measure(costLarge))
}

// A claim costs its batch however many aggregates have a row in retry
// backoff: it reads neither those rows nor their aggregates' later ones.
func TestClaimCostIsItsBatchWithAnyNumberOfRowsInBackoff(t *testing.T) {
	// Not parallel: another test's open snapshot keeps VACUUM from marking
	// pages all-visible, and the generic plan then reads the heap too.
	const batch = 500
	measure := func(backoff int) map[string]testkit.Work {
		c := newCostDB(t)
		c.exec(t, `INSERT INTO {{relays}} (id, name) VALUES ('me', 'me')`)
		// As Fail leaves them, ahead of the healthy rows in id order.
		c.insert(t, backoff, `'poison-' || g`, "pending", "1", "now() + interval '1 hour'", "now()", "NULL")
		c.exec(t, `UPDATE {{table}} SET retry_at = next_attempt_at WHERE attempts > 0`)
		// Retries due now, and the healthy events.
		c.insert(t, 50, `'retried-' || g`, "pending", "1", "now() - interval '1 second'", "now()", "NULL")
		c.exec(t, `UPDATE {{table}} SET retry_at = next_attempt_at WHERE attempts > 0 AND retry_at = '-infinity'`)
		c.insert(t, 2*batch, `'healthy-' || (g % 300)`, "pending", "0", "now()", "now()", "NULL")
		c.settle(t)
		return c.claimWork(t, batch)
	}
	testkit.AssertFlat(t, "claim", costRatio, measure(costSmall), measure(costLarge))
}

// A fleet started on a backlog (after an outage, a deploy) claims from its
// head: a claim reads its batch and the fences of its aggregates, not the
// rows queued behind them. The crash suite's big-backlog scenario drains
// 100,000 and 10,000,000 rows with real relays at full size; this is its
// proof at CI's size, where a drain's rate is a timer.
func TestClaimCostIsItsBatchWithAnyPendingBacklog(t *testing.T) {
	// Not parallel: see TestClaimCostIsItsBatchWithAnyNumberOfRowsInBackoff.
	const batch = 500
	measure := func(backlog int) map[string]testkit.Work {
		c := newCostDB(t)
		c.exec(t, `INSERT INTO {{relays}} (id, name) VALUES ('me', 'me')`)
		c.insert(t, backlog, `'agg-' || (g % 1000)`, "pending", "0", "now()", "now()", "NULL")
		c.settle(t)
		return c.claimWork(t, batch)
	}
	testkit.AssertFlat(t, "claim from the head of a backlog", costRatio, measure(10*costSmall), measure(10*costLarge))
}

// A WAL relay resuming its slot reads the highest dead row and the
// table's highest row with one index descent each, whatever the backlog of
// pending rows above the last settled one (WALSettledMax, which walks it,
// runs only for a slot whose marker has no settled row).
func TestWALResumeBoundsCostNoBacklog(t *testing.T) {
	for _, stmt := range []string{outboxsql.WALDeadMax, outboxsql.WALHighestRow} {
		measure := func(backlog int) map[string]testkit.Work {
			c := newCostDB(t)
			c.insert(t, 100, `'dead-' || g`, "dead", "10", "now()", "now()", "NULL")
			c.insert(t, 100, `'published-' || g`, "published", "0", "now()", "now()", "now()")
			c.insert(t, backlog, `'pending-' || g`, "pending", "0", "now()", "now()", "NULL")
			c.settle(t)
			return c.work(t, []string{settings(outboxsql.WALSettledMaxSettings)}, stmt)
		}
		testkit.AssertFlat(t, stmt, costRatio, measure(costSmall), measure(costLarge))
	}
}

// A claim costs its batch however many events are scheduled for later
// (Event.NotBefore, schema version 6): written with their retry_at at
// their time, they are read neither by the retries' range (not due) nor by
// the first attempts' walk (not in outbox_fresh_idx). Each scheduled event
// here is its aggregate's only row, as a reminder with an aggregate id of
// its own is; rows written after a scheduled row of their aggregate are held
// back behind it and, like rows behind a retry in backoff, walked by each
// claim (see the package documentation of relay).
func TestClaimCostIsItsBatchWithAnyNumberOfScheduledRows(t *testing.T) {
	// Not parallel: another test's open snapshot keeps VACUUM from marking
	// pages all-visible, and the generic plan then reads the heap too.
	const batch = 500
	measure := func(scheduled int) map[string]testkit.Work {
		c := newCostDB(t)
		c.exec(t, `INSERT INTO {{relays}} (id, name) VALUES ('me', 'me')`)
		// As the writer leaves them, ahead of the healthy rows in id order.
		c.insertScheduled(t, scheduled, `'reminder-' || g`, "now() + interval '7 days'", "now()")
		// Scheduled rows whose time has come, and the healthy events.
		c.insertScheduled(t, 50, `'due-' || g`, "now() - interval '1 second'", "now() - interval '1 hour'")
		c.insert(t, 2*batch, `'healthy-' || (g % 300)`, "pending", "0", "now()", "now()", "NULL")
		c.settle(t)
		return c.claimWork(t, batch)
	}
	large := measure(costLarge)
	testkit.AssertFlat(t, "claim", costRatio, measure(costSmall), large)
	// And against none scheduled (the rows due since a second ago still
	// there, so the first attempts' walk probes outbox_retry_agg_idx in
	// both): the scheduled rows' entries deepen that index by a level at
	// most, one buffer per row walked (measured: 3,637 against 4,153
	// buffers under the generic plan, 4,074 against 4,126 under the custom).
	testkit.AssertFlat(t, "claim, none scheduled against 20,000", costRatio, measure(0), large)
}

// The statements that read the scheduled rows apart (the lag, the due
// lag, the next one due) read an entry or two whatever their number and
// the backlog's; the count reads the scheduled rows and nothing of the
// rest of the backlog.
func TestScheduledReadsCostNothingOfTheBacklog(t *testing.T) {
	measure := func(backlog, scheduled int) (lag, next, count map[string]testkit.Work) {
		c := newCostDB(t)
		c.insert(t, backlog, `'agg-' || g`, "pending", "0", "now()", "now() - interval '1 hour'", "NULL")
		c.insertScheduled(t, scheduled, `'reminder-' || g`, "now() + interval '7 days'", "now() - interval '1 day'")
		c.insertScheduled(t, 100, `'soon-' || g`, "now() + interval '1 hour'", "now()")
		c.settle(t)
		// One process: a parallel worker's buffers are not the top node's.
		serial := []string{`SELECT set_config('max_parallel_workers_per_gather', '0', true)`}
		return c.work(t, nil, outboxsql.StatsLags, outboxsql.CountArgs{Cap: outboxsql.CountCap}.Args()...), c.work(t, nil, `SELECT `+outboxsql.NextScheduled),
			c.work(t, serial, `SELECT `+outboxsql.ScheduledCount, outboxsql.CountArgs{Cap: 500}.Args()...)
	}
	smallLag, smallNext, _ := measure(costSmall, costSmall)
	largeLag, largeNext, _ := measure(costLarge, costLarge)
	testkit.AssertFlat(t, "lag with scheduled rows", costRatio, smallLag, largeLag)
	testkit.AssertFlat(t, "next scheduled", costRatio, smallNext, largeNext)
	// The count beside 10x the backlog, 200 scheduled rows in both: it
	// reads their index entries (two pages) and, where VACUUM could not
	// mark their pages all-visible (a concurrent snapshot), their heap
	// pages (a dozen), which is all that may differ. Reading the backlog
	// would cost it at least the claim index's 60 pages at 20,000 rows.
	_, _, smallCount := measure(costSmall, 200)
	_, _, largeCount := measure(costLarge, 200)
	for _, mode := range testkit.PlanModes {
		s, l := smallCount[mode], largeCount[mode]
		t.Logf("scheduled count, %s: %d buffers beside %d unpublished rows, %d beside %d", mode, s.Buffers, costSmall, l.Buffers, costLarge)
		if l.Buffers > s.Buffers+30 {
			t.Errorf("scheduled count, %s: %d buffers beside 10x the backlog, more than 30 over the %d beside 1x: it reads the backlog",
				mode, l.Buffers, s.Buffers)
		}
	}
	// Counted up to its cap (500 here), the count reads as much of 10x
	// the scheduled rows.
	_, _, fewScheduled := measure(costSmall, costSmall)
	_, _, manyScheduled := measure(costSmall, costLarge)
	testkit.AssertFlat(t, "scheduled count, capped, of 10x the scheduled rows", costRatio, fewScheduled, manyScheduled)
}

// Rows due behind an earlier row of their aggregate still scheduled (a
// digest tomorrow, then a reminder due now) do not fill the retries'
// window: another aggregate's due row is claimed all the same.
func TestClaimPassesRetriesHeldBehindAScheduledRow(t *testing.T) {
	c := newCostDB(t)
	c.exec(t, `INSERT INTO {{relays}} (id, name) VALUES ('me', 'me')`)
	// Per user: a digest tomorrow, then a reminder that was due an hour ago.
	c.insertScheduled(t, 20, `'user-' || g`, "now() + interval '1 day'", "now() - interval '2 hours'")
	c.insertScheduled(t, 20, `'user-' || g`, "now() - interval '1 hour'", "now() - interval '2 hours'")
	// Another user's reminder, due a minute ago, alone in its aggregate.
	c.insertScheduled(t, 1, `'other'`, "now() - interval '1 minute'", "now() - interval '2 hours'")
	rows, err := c.db.Query(c.names.Render(outboxsql.ClaimSettings))
	if err == nil {
		rows.Close()
	}
	var n int
	for i := 0; i < 3; i++ {
		n += c.claimed(t, 10)
	}
	if n == 0 {
		c.exec(t, `DELETE FROM {{table}} WHERE aggregate_id LIKE 'user-%'`)
		m := c.claimed(t, 10)
		t.Fatalf("the due event of aggregate 'other' is never claimed: 20 blocked due rows fill the retry window of 10 (without them the claim takes %d)", m)
	}
}

// The claim walks the first attempts from the claim floor, so the index
// entries of the rows published since the last VACUUM (a drained backlog
// of millions, on a table autovacuum has not reached) cost it nothing.
// Without the floor it read them all: with the floor left at 0 this test
// fails (907 and 8,559 buffers under the custom plan, 112 and 605 under
// the generic one; with it, 58 and 59).
func TestClaimCostIsItsBatchWithAnyDrainedBacklog(t *testing.T) {
	// Not parallel: see TestClaimCostIsItsBatchWithAnyNumberOfRowsInBackoff.
	const batch = 10 // the walk's cost, not the batch's, is what grows
	measure := func(drained int) map[string]testkit.Work {
		c := newCostDB(t)
		c.drain(t, drained, batch)
		return c.claimWork(t, batch)
	}
	testkit.AssertFlat(t, "claim over a drained backlog", costRatio, measure(10*costSmall), measure(10*costLarge))
}

// drain writes drained rows and publishes them (no VACUUM since), then
// writes twice batch pending rows and raises the claim floor to the first
// of them, for relay "me".
func (c costDB) drain(t *testing.T, drained, batch int) {
	t.Helper()
	c.exec(t, `INSERT INTO {{relays}} (id, name) VALUES ('me', 'me')`)
	c.insert(t, drained, `'drained-' || (g % 300)`, "pending", "0", "now()", "now()", "NULL")
	c.exec(t, `UPDATE {{table}} SET state = 'published', published_at = now()`) // the drain; no VACUUM since
	c.insert(t, 2*batch, `'healthy-' || (g % 300)`, "pending", "0", "now()", "now()", "NULL")
	c.exec(t, `ANALYZE {{table}}`)
	c.exec(t, `VACUUM ANALYZE {{relays}}`)
	if floor, first := c.raiseFloor(t), int64(drained+1); floor != first {
		t.Fatalf("claim floor %d, want %d: the first row not published", floor, first)
	}
}
