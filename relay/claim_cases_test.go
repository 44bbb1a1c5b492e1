package relay

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// A row of the claiming incarnation whose lease ended is not a blocker, even
// when another transaction holds it locked (a peer's mark, an operator): the
// incarnation holds it in memory ahead of the later rows of its aggregate.
// SKIP LOCKED passes over it; the later rows are claimed; once the lock goes
// the row itself is claimed again.
func TestClaimPassesOverItsOwnRowLockedElsewhere(t *testing.T) {
	t.Parallel()
	b, r := setupKM(t) // k: 1 3 5, m: 2 4 6
	inc := r.members.cur.Load()
	b.exec(t, `UPDATE outbox SET lease_owner = $1, lease_expires_at = now() - interval '1 second' WHERE id = 1`, inc.token)
	release := b.lock(t, `SELECT 1 FROM outbox WHERE id = 1 FOR UPDATE`)
	if got := claimIDs(t, r); got != "2 3 4 5 6" {
		t.Fatalf("claimed %q while the incarnation's own row 1 is locked elsewhere, want 2 3 4 5 6", got)
	}
	release()
	b.exec(t, `UPDATE outbox SET lease_expires_at = now() - interval '1 second' WHERE id = 1`)
	if got := claimIDs(t, r); got != "1" {
		t.Fatalf("claimed %q after the lock went, want 1", got)
	}
}

// A due row changed by a transaction that commits after the claim took its
// snapshot, but before the claim locks it, may be claimed on its latest
// version or passed over (PostgreSQL releases whose TID scan rechecks the
// tuple id pass over it), but a later row of its aggregate is never claimed
// without it. The claim is slowed down after its snapshot by a function
// called from the "live" CTE.
func TestClaimHoldsBackBehindARowChangedAfterItsSnapshot(t *testing.T) {
	t.Parallel()
	b, r := setupKM(t) // k: 1 3 5, m: 2 4 6
	const live = "live AS MATERIALIZED (\n    SELECT id FROM "
	i := strings.Index(r.sql.claim, live)
	if i < 0 {
		t.Fatal("the claim has no live CTE to slow down")
	}
	j := i + strings.Index(r.sql.claim[i:], "\n)")
	b.exec(t, `CREATE FUNCTION claim_test_nap() RETURNS bool LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.3); RETURN true; END $$`)
	r.sql.claim = r.sql.claim[:j] + " AND claim_test_nap()" + r.sql.claim[j:]
	done := make(chan string, 1)
	go func() {
		rows, err := r.claimer.claim(context.Background(), 100)
		if err != nil {
			done <- "error: " + err.Error()
			return
		}
		done <- idsOf(rows)
	}()
	testkit.WaitFor(t, 10*time.Second, "the claim slowed down after its snapshot", func() bool {
		var n int
		if err := b.db.SQL.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'
			AND position('claim_test_nap' in query) > 0 AND position($1 in query) > 0`, b.db.Schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	b.exec(t, `UPDATE outbox SET payload = payload WHERE id = 3`)
	switch got := <-done; got {
	case "1 2 3 4 5 6", "1 2 4 6":
	default:
		t.Fatalf("claimed %q with row 3 changed after the snapshot, want 1 2 3 4 5 6 or 1 2 4 6 (never 5 without 3)", got)
	}
}

// joinFilterWork runs the claim for owner on a generic plan under the
// claim's settings and setting, and returns how many rows its joins rejected
// in their join filters: the work of its membership tests, which must stay
// linear in the batch.
func joinFilterWork(t *testing.T, db *sql.DB, claim, owner string, limit int, setting string) int {
	t.Helper()
	filtered, _ := claimPlanWork(t, db, claim, owner, limit, setting)
	return filtered
}

// claimPlanWork runs the claim as joinFilterWork does and returns the rows
// its joins rejected in their join filters and the rows all its plan nodes
// returned over all their loops (a subplan scanned once per row of the
// batch counts the batch once per row).
func claimPlanWork(t *testing.T, db *sql.DB, claim, owner string, limit int, setting string) (filtered, returned int) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{`BEGIN`, `SET LOCAL plan_cache_mode = force_generic_plan`, `SET LOCAL enable_sort = off`,
		`SET LOCAL enable_bitmapscan = off`, `SET LOCAL enable_seqscan = off`, `SET LOCAL lock_timeout = '5s'`, `SET LOCAL ` + setting, `PREPARE work_claim AS ` + claim} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%.40s: %v", q, err)
		}
	}
	defer conn.ExecContext(ctx, `ROLLBACK`)              //nolint:errcheck
	defer conn.ExecContext(ctx, `DEALLOCATE work_claim`) //nolint:errcheck
	var plan string
	if err := conn.QueryRowContext(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) EXECUTE work_claim('%s', %d, '30 seconds', '%s', 1000000000, 0)`,
		owner, limit, outboxsql.ShardMask(allShards()))).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if f, ok := v["Rows Removed by Join Filter"].(float64); ok {
				filtered += int(f)
			}
			if r, ok := v["Actual Rows"].(float64); ok {
				loops, _ := v["Actual Loops"].(float64)
				returned += int(r * loops)
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	var doc any
	if err := json.Unmarshal([]byte(plan), &doc); err != nil {
		t.Fatal(err)
	}
	walk(doc)
	return filtered, returned
}

// The claim's work stays linear in its batch when it takes every row it
// reads: no part of it (such as finding the first due row for the byte
// bound) is computed again for each row of the batch. Nothing in the
// buffers read shows that work, only the rows its plan nodes return: a
// 2,000-row claim took 400 ms instead of 20 when the first due row was
// read again per row.
func TestClaimWorkStaysLinearInItsBatch(t *testing.T) {
	testkit.Long(t, "the claim's work at two batch sizes (a plan-work test)")
	t.Parallel()
	const n = 1000
	b := setupInternal(t)
	aggs := make([]string, 100)
	for i := range aggs {
		aggs[i] = fmt.Sprintf("a%d", i)
	}
	b.write(t, n/len(aggs), aggs...)
	b.exec(t, `ANALYZE outbox`)
	r := b.newRelay(t, "r1")
	b.exec(t, `INSERT INTO outbox_relays (id, name) VALUES ('me#1', 'me')`)
	for _, setting := range joinMethods {
		if _, w := claimPlanWork(t, b.db.SQL, r.sql.claim, "me#1", n, setting); w > 100*n {
			t.Errorf("with %s, a claim of %d rows returned %d rows from its plan nodes: more than linear in the batch", setting, n, w)
		}
	}
}

// joinMethods are the settings the claim's work is measured under: on a
// generic plan the planner estimates the CTEs at a row or two, so which join
// method it picks follows the table's size and statistics of the moment.
var joinMethods = []string{"enable_nestloop = off", "enable_hashjoin = off"}

// The claim's test of each row's aggregate against the rows it does not
// take must cost about the same per row, whichever join method the planner
// picks, however those rows fall: all in one aggregate (a hot aggregate
// whose rows another transaction holds locked, as in a handover), or one
// aggregate held by a peer ahead of rows of other aggregates.
func TestClaimAggregateTestStaysLinear(t *testing.T) {
	t.Parallel()
	const n = 1000
	t.Run("hot aggregate locked", func(t *testing.T) {
		t.Parallel()
		b := setupInternal(t)
		b.write(t, n, "hot")
		b.exec(t, `ANALYZE outbox`)
		r := b.newRelay(t, "r1")
		b.exec(t, `INSERT INTO outbox_relays (id, name) VALUES ('me#1', 'me')`)
		b.lock(t, `SELECT 1 FROM outbox FOR UPDATE`)
		for _, setting := range joinMethods {
			if w := joinFilterWork(t, b.db.SQL, r.sql.claim, "me#1", n, setting); w > 10*n {
				t.Errorf("with %s, a claim of %d rows of one aggregate, all locked elsewhere, rejected %d rows in join filters", setting, n, w)
			}
		}
	})
	t.Run("aggregate held by a peer", func(t *testing.T) {
		t.Parallel()
		b := setupInternal(t)
		aggs := make([]string, 2*n)
		for i := range aggs {
			aggs[i] = fmt.Sprintf("a%d", i)
		}
		b.write(t, 1, aggs...)
		r := b.newRelay(t, "r1")
		b.exec(t, `INSERT INTO outbox_relays (id, name) VALUES ('me#1', 'me'), ('peer#1', 'peer')`)
		// The first n rows become one aggregate's, which a peer holds.
		b.exec(t, `UPDATE outbox SET aggregate_id = 'held', lease_owner = 'peer#1', lease_expires_at = now() + interval '1 hour',
			next_attempt_at = now() + interval '1 hour' WHERE id <= $1`, n)
		for _, setting := range joinMethods {
			if w := joinFilterWork(t, b.db.SQL, r.sql.claim, "me#1", 2*n, setting); w > 10*n {
				t.Errorf("with %s, a claim of %d rows behind %d rows a peer holds rejected %d rows in join filters", setting, n, n, w)
			}
		}
	})
}
