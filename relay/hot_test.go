package relay

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// A claim records itself in the lease columns alone, which no index covers,
// so on a page with room (schema version 3's fillfactor) PostgreSQL updates
// the row in place: a heap-only (HOT) update, with no new index entry.
func TestClaimIsHeapOnlyUpdate(t *testing.T) {
	t.Parallel()
	b, r := setupReady(t, 10, "k", "m")
	if got := claimUpTo(t, r, 20); got != "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20" {
		t.Fatalf("claimed %q", got)
	}
	// Backends report their statistics about a second after going idle.
	var hot, updated int64
	testkit.Eventually(15*time.Second, func() bool {
		if err := b.db.SQL.QueryRow(`SELECT n_tup_hot_upd, n_tup_upd FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'outbox'`,
			b.db.Schema).Scan(&hot, &updated); err != nil {
			t.Fatal(err)
		}
		return updated >= 20
	})
	if updated != 20 || hot != 20 {
		t.Fatalf("claiming 20 rows made %d updates, %d of them heap-only; want 20 and 20", updated, hot)
	}
}

// A relay of schema version 2 (the claim statement below, as it shipped)
// running beside version-3 relays during an upgrade must neither take the
// rows they claimed nor any later row of those aggregates: to it, a row
// claimed the new way is pending and not due before its lease ends.
func TestVersion2ClaimLeavesVersion3ClaimsAlone(t *testing.T) {
	t.Parallel()
	b, r := setupKM(t) // k: 1 3 5, m: 2 4 6
	if got := claimUpTo(t, r, 2); got != "1 2" {
		t.Fatalf("claimed %q, want 1 2", got)
	}
	b.exec(t, `INSERT INTO outbox_relays (id, name) VALUES ('old#1', 'old')`)
	names, err := outboxsql.NamesFor(b.db.Table().Schema, b.db.Table().Name)
	if err != nil {
		t.Fatal(err)
	}
	claimV2 := names.Render(claimVersion2)
	// Version 2 took its shards as an array.
	args := []any{"old#1", 10, outboxsql.Interval(time.Minute), outboxsql.Int16Array(allShards()), 10}
	claim := func() string {
		t.Helper()
		rows, err := b.db.SQL.QueryContext(context.Background(), claimV2, args...)
		var ids []int64
		for _, row := range testkit.ScanAll(t, rows, err) {
			ids = append(ids, row[0].(int64)) // the row id
		}
		slices.Sort(ids) // as the relay sorts what a claim returns
		return strings.Trim(fmt.Sprint(ids), "[]")
	}
	if got := claim(); got != "" {
		t.Fatalf("a version-2 relay claimed %q while rows 1 and 2 were claimed by a version-3 one; want none", got)
	}
	// Once r1's lease has ended, the version-2 relay may take them all.
	b.exec(t, `UPDATE outbox SET lease_expires_at = now() - interval '1 second', next_attempt_at = now() - interval '1 second' WHERE id <= 2`)
	if got := claim(); got != "1 2 3 4 5 6" {
		t.Fatalf("after r1's lease ended, a version-2 relay claimed %q; want 1 2 3 4 5 6", got)
	}
}

func allShards() []int16 {
	s := make([]int16, numShards)
	for i := range s {
		s[i] = int16(i)
	}
	return s
}

// claimVersion2 is outboxsql.Claim as relays of schema version 2 run it.
const claimVersion2 = `
WITH fence AS MATERIALIZED (
    SELECT DISTINCT ON (o.aggregate_id) o.aggregate_id, o.id AS first_id
    FROM {{table}} o
    WHERE o.state = 'pending' AND o.attempts > 0 AND o.next_attempt_at > now()
      AND o.shard = ANY($4::smallint[])
    ORDER BY o.aggregate_id, o.id
), live AS MATERIALIZED (
    SELECT id FROM {{relays}}
), seen AS MATERIALIZED (
    SELECT o.ctid AS tid, o.id, o.aggregate_id,
           (o.state = 'pending' AND o.next_attempt_at <= now())
             OR (o.state = 'claimed' AND (o.lease_expires_at <= now()
                 OR o.lease_owner NOT IN (SELECT id FROM live))) AS due,
           o.state = 'claimed' AND o.lease_owner = $1 AS mine
    FROM {{table}} o
    WHERE o.state IN ('pending', 'claimed')
      AND o.shard = ANY($4::smallint[])
      AND NOT EXISTS (SELECT 1 FROM fence f WHERE f.aggregate_id = o.aggregate_id AND f.first_id < o.id)
      AND EXISTS (SELECT 1 FROM live WHERE id = $1)
    ORDER BY o.id
    LIMIT $5
), took AS MATERIALIZED (
    SELECT o.id
    FROM {{table}} o
    WHERE o.ctid = ANY (ARRAY(SELECT tid FROM seen WHERE due LIMIT $2))
      AND ((o.state = 'pending' AND o.next_attempt_at <= now())
        OR (o.state = 'claimed' AND (o.lease_expires_at <= now()
            OR o.lease_owner NOT IN (SELECT id FROM live))))
    FOR UPDATE OF o SKIP LOCKED
), missed AS MATERIALIZED (
    SELECT s.id FROM seen s WHERE s.due AND s.id NOT IN (SELECT id FROM took)
), blocked AS MATERIALIZED (
    SELECT s.aggregate_id, min(s.id) AS first_id
    FROM seen s
    WHERE NOT s.mine AND (NOT s.due OR s.id IN (SELECT id FROM missed))
    GROUP BY s.aggregate_id
), claim AS MATERIALIZED (
    SELECT s.tid FROM seen s
    WHERE s.due AND s.id NOT IN (SELECT id FROM missed)
      AND NOT EXISTS (SELECT 1 FROM blocked b WHERE b.aggregate_id = s.aggregate_id AND b.first_id < s.id)
)
UPDATE {{table}} o
SET state = 'claimed', lease_owner = $1, lease_expires_at = now() + $3::interval
WHERE o.ctid = ANY (ARRAY(SELECT tid FROM claim))
RETURNING o.id, o.event_id::text, o.topic, o.aggregate_type, o.aggregate_id, o.event_type,
          o.content_type, o.payload, o.headers::text, o.created_at, o.attempts, o.ctid::text`

// A mark is not heap-only (it takes the row out of the claim index), so its
// new version needs room on the page. Reached through an index, each page
// the mark reads is pruned of the versions the claims left dead, and the
// new versions fit where those were: draining a backlog leaves the table
// about the size it was. Marks that reached rows by tuple id pruned
// nothing, and the table doubled.
//
// The test runs on a PostgreSQL cluster of its own: a transaction open
// anywhere on the server, in any database (the crash suite's writers, in
// another package running beside this one), holds the horizon page pruning
// goes by, and the dead versions stay.
func TestMarkKeepsTheTableItsSize(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	quiet := testkit.QuietCluster
	unlock, err := quiet.Lock(ctx) // another package's or checkout's tests may hold it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock) // after the schema's drop
	url, err := quiet.Ensure(ctx)
	if err != nil {
		t.Fatalf("needs a PostgreSQL cluster of its own: %v", err)
	}
	s := testkit.NewSchema(t, url, testkit.SchemaName("t_marks"), true)
	b := &internalBundle{db: &testkit.DB{SQL: s.SQL, URL: s.URL, Schema: s.Name}, w: testkit.NewWriter(t, s.Table())}
	b.write(t, 500, "a", "b", "c", "d")
	pages := func() int64 {
		t.Helper()
		var n int64
		if err := s.SQL.QueryRow(`SELECT pg_relation_size('outbox') / current_setting('block_size')::int`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := pages()
	r := b.readyRelay(t, "r1")
	c := newCompleter(r.completerDeps())
	for marked := 0; marked < 2000; {
		rows, err := r.claimer.claim(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 {
			t.Fatalf("claim took nothing after %d of 2000 rows", marked)
		}
		if err := c.flush(ctx, rows, nil, nil); err != nil {
			t.Fatal(err)
		}
		marked += len(rows)
	}
	var left int
	if err := s.SQL.QueryRow(`SELECT count(*) FROM outbox WHERE state <> 'published'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d rows not published (%v)", left, err)
	}
	if after := pages(); after > before+before/4 {
		t.Fatalf("claiming and marking 2000 rows grew the table from %d to %d pages; want at most %d", before, after, before+before/4)
	}
}
