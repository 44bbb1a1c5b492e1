package engines_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// The relay's membership, shard, prune, stats and timeout statements on
// MySQL (internal/outboxsql/mysql_members.go), on the MariaDB of
// .ci/services: each test holds one statement to its contract.

// querier is what the helpers below run statements on: a *sql.DB, a
// *sql.Conn or a *sql.Tx.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// column reads the first column of every row query returns.
func column[T any](t testing.TB, ctx context.Context, q querier, query string, args ...any) ([]T, error) {
	t.Helper()
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// mustColumn is column, failing the test on an error.
func mustColumn[T any](t testing.TB, q querier, query string, args ...any) []T {
	t.Helper()
	out, err := column[T](t, context.Background(), q, query, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// affected runs query and returns the rows it affected.
func affected(t testing.TB, q querier, query string, args ...any) int64 {
	t.Helper()
	res, err := q.ExecContext(context.Background(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// readCommitted begins a READ COMMITTED transaction, as the relay's are.
func readCommitted(t testing.TB, db *sql.DB) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

func (b *claimBundle) relays(t *testing.T) []string {
	t.Helper()
	return mustColumn[string](t, b.db, `SELECT id FROM outbox_relays ORDER BY id`)
}

func (b *claimBundle) registerAs(t *testing.T, id, name string) {
	t.Helper()
	args := outboxsql.RegisterArgs{Owner: id, Name: name, Host: "host-" + id}
	affected(t, b.db, b.names.Render(outboxsql.MySQLRegister), args.Args()...)
}

// Register writes the incarnation's row with the database clock; a
// heartbeat refreshes it and reports one row, even at the same clock
// reading; a heartbeat of an incarnation that is gone reports none.
func TestMySQLRegisterAndHeartbeat(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.registerAs(t, "r1", "relay-a")
	var name, host string
	var started, beat outboxsql.MySQLTime
	if err := b.db.QueryRow(`SELECT name, host, started_at, heartbeat_at FROM outbox_relays WHERE id = 'r1'`).
		Scan(&name, &host, &started, &beat); err != nil {
		t.Fatal(err)
	}
	if name != "relay-a" || host != "host-r1" || !started.Valid || time.Since(beat.Time).Abs() > time.Minute {
		t.Fatalf("registered row: name %q host %q started %v heartbeat %v", name, host, started, beat)
	}
	beatSQL := b.names.Render(outboxsql.MySQLHeartbeat)
	if n := affected(t, b.db, beatSQL, outboxsql.MySQLOwnerArgs{Owner: "r1"}.Args()...); n != 1 {
		t.Fatalf("heartbeat of a registered incarnation: %d rows, want 1", n)
	}
	if n := affected(t, b.db, beatSQL, outboxsql.MySQLOwnerArgs{Owner: "gone"}.Args()...); n != 0 {
		t.Fatalf("heartbeat of an incarnation not registered: %d rows, want 0", n)
	}
	// Two heartbeats at one clock reading: MySQL counts changed rows, so
	// the second must still change the row to report it live.
	ctx := context.Background()
	conn, err := b.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SET SESSION timestamp = UNIX_TIMESTAMP(UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)`); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, `SET SESSION timestamp = DEFAULT`)
	for i := range 2 {
		if n := affected(t, conn, beatSQL, outboxsql.MySQLOwnerArgs{Owner: "r1"}.Args()...); n != 1 {
			t.Fatalf("heartbeat %d at one clock reading: %d rows, want 1 (the incarnation would think itself gone)", i+1, n)
		}
	}
}

// Forgetting stale relays deletes those whose heartbeat is older than the
// timeout and returns them; a stale row another transaction holds locked
// is passed over, not waited for, and forgotten at a later round.
func TestMySQLForgetStaleRelaysSkipsLockedRows(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	for _, id := range []string{"live", "stale", "stale-locked"} {
		b.registerAs(t, id, id)
	}
	b.exec(t, `UPDATE outbox_relays SET heartbeat_at = UTC_TIMESTAMP(6) - INTERVAL 1 HOUR WHERE id LIKE 'stale%'`)

	holder := readCommitted(t, b.db)
	if _, err := holder.Exec(`SELECT id FROM outbox_relays WHERE id = 'stale-locked' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	forget := func() ([]string, error) {
		// Far shorter than innodb_lock_wait_timeout: a statement that
		// waits for the held row fails here.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		tx, err := b.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return nil, err
		}
		defer tx.Rollback()
		ids, err := column[string](t, ctx, tx, b.names.Render(outboxsql.MySQLStaleRelays), outboxsql.MySQLStaleArgs{StaleAfter: time.Minute}.Args()...)
		if err != nil || len(ids) == 0 {
			return ids, err
		}
		res, err := tx.ExecContext(ctx, outboxsql.MySQLDeleteRelays(b.names, len(ids)), outboxsql.MySQLIDsArgs[string]{IDs: ids}.Args()...)
		if err != nil {
			return nil, err
		}
		if n, _ := res.RowsAffected(); n != int64(len(ids)) {
			return nil, fmt.Errorf("deleted %d of %v", n, ids)
		}
		return ids, tx.Commit()
	}
	got, err := forget()
	if err != nil || !slices.Equal(got, []string{"stale"}) {
		t.Fatalf("forget with stale-locked held elsewhere = %v, %v; want [stale], at once", got, err)
	}
	if got := b.relays(t); !slices.Equal(got, []string{"live", "stale-locked"}) {
		t.Fatalf("relays left: %v", got)
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got, err := forget(); err != nil || !slices.Equal(got, []string{"stale-locked"}) {
		t.Fatalf("forget once the lock is gone = %v, %v; want [stale-locked]", got, err)
	}
	if got := b.relays(t); !slices.Equal(got, []string{"live"}) {
		t.Fatalf("relays left: %v", got)
	}
}

// Replacing predecessors deletes the other incarnations of the name and
// returns them, and nothing else.
func TestMySQLReplacePredecessors(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.registerAs(t, "a-1", "a")
	b.registerAs(t, "a-2", "a")
	b.registerAs(t, "a-3", "a")
	b.registerAs(t, "b-1", "b")
	tx := readCommitted(t, b.db)
	ids := mustColumn[string](t, tx, b.names.Render(outboxsql.MySQLPredecessors), outboxsql.ReplaceArgs{Name: "a", Owner: "a-3"}.Args()...)
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"a-1", "a-2"}) {
		t.Fatalf("predecessors of a-3: %v, want [a-1 a-2]", ids)
	}
	if n := affected(t, tx, outboxsql.MySQLDeleteRelays(b.names, len(ids)), outboxsql.MySQLIDsArgs[string]{IDs: ids}.Args()...); n != 2 {
		t.Fatalf("deleted %d, want 2", n)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := b.relays(t); !slices.Equal(got, []string{"a-3", "b-1"}) {
		t.Fatalf("relays left: %v, want [a-3 b-1]", got)
	}
}

// Other incarnations counts the live ones of the name but the relay's own.
func TestMySQLOtherIncarnations(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	for _, id := range []string{"own-1", "own-2", "live", "stale"} {
		b.registerAs(t, id, "a")
	}
	b.registerAs(t, "other-name", "b")
	b.exec(t, `UPDATE outbox_relays SET heartbeat_at = UTC_TIMESTAMP(6) - INTERVAL 1 HOUR WHERE id = 'stale'`)
	count := func(own ...string) int64 {
		args := outboxsql.MySQLOtherIncarnationsArgs{Name: "a", Own: own, StaleAfter: time.Minute}
		return mustColumn[int64](t, b.db, outboxsql.MySQLOtherIncarnations(b.names, len(own)), args.Args()...)[0]
	}
	if got := count("own-1", "own-2"); got != 1 {
		t.Fatalf("others of own-1 and own-2: %d, want 1 (live)", got)
	}
	if got := count("own-1"); got != 2 {
		t.Fatalf("others of own-1: %d, want 2", got)
	}
	if got := count(); got != 3 {
		t.Fatalf("with no own ids: %d, want 3", got)
	}
}

// acquire runs MySQLAcquireShards and MySQLOwnedShardList in one READ
// COMMITTED transaction, as a relay's round does.
func (b *claimBundle) acquire(ctx context.Context, t testing.TB, owner string, shards []int16) ([]int16, error) {
	tx, err := b.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	args := outboxsql.MySQLShardsArgs{Owner: owner, Shards: shards}
	if _, err := tx.ExecContext(ctx, outboxsql.MySQLAcquireShards(b.names, len(shards)), args.Args()...); err != nil {
		return nil, err
	}
	owned, err := column[int16](t, ctx, tx, b.names.Render(outboxsql.MySQLOwnedShardList), outboxsql.MySQLOwnerArgs{Owner: owner}.Args()...)
	if err != nil {
		return nil, err
	}
	return owned, tx.Commit()
}

func shardRange(lo, hi int16) []int16 {
	var out []int16
	for s := lo; s < hi; s++ {
		out = append(out, s)
	}
	return out
}

// Acquiring takes the shards asked for that are free or owned by an
// incarnation that is gone, never a live one's, and returns every shard
// the incarnation owns afterwards.
func TestMySQLAcquireShardsTakesFreeOrGoneOnly(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.registerAs(t, "r1", "a")
	b.registerAs(t, "r2", "b")
	b.exec(t, `UPDATE outbox_shards SET owner = CASE shard WHEN 1 THEN 'r2' WHEN 2 THEN 'ghost' WHEN 4 THEN 'r1' END WHERE shard IN (1, 2, 4)`)
	got, err := b.acquire(context.Background(), t, "r1", []int16{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []int16{2, 3, 4}) {
		t.Fatalf("r1 acquiring 1 (r2's), 2 (a gone owner's), 3 (free) while owning 4: owns %v, want [2 3 4]", got)
	}
	if got := mustColumn[string](t, b.db, `SELECT owner FROM outbox_shards WHERE shard = 1`); got[0] != "r2" {
		t.Fatalf("shard 1's owner: %v, want r2", got)
	}
}

// Two incarnations acquiring overlapping shards at once: the second waits
// for the first's row locks and passes over what it took, so no shard is
// returned to both, and each returns what it owns after.
func TestMySQLAcquireShardsConcurrently(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.registerAs(t, "r1", "a")
	b.registerAs(t, "r2", "b")
	ctx := context.Background()

	// Deterministic: r2's acquire runs while r1's has taken and not
	// committed; some of the shards both ask for were a gone owner's.
	b.exec(t, `UPDATE outbox_shards SET owner = 'ghost' WHERE shard BETWEEN 14 AND 16`)
	tx := readCommitted(t, b.db)
	if _, err := tx.Exec(outboxsql.MySQLAcquireShards(b.names, 10), outboxsql.MySQLShardsArgs{Owner: "r1", Shards: shardRange(10, 20)}.Args()...); err != nil {
		t.Fatal(err)
	}
	type result struct {
		owned []int16
		err   error
	}
	done := make(chan result, 1)
	go func() {
		owned, err := b.acquire(ctx, t, "r2", shardRange(15, 25))
		done <- result{owned, err}
	}()
	testkit.WaitFor(t, 10*time.Second, "r2's acquire waiting on r1's locks", func() bool {
		var n int
		err := b.db.QueryRow(`SELECT count(*) FROM information_schema.processlist
			WHERE db = DATABASE() AND info LIKE 'UPDATE %outbox_shards%SET owner%'`).Scan(&n)
		return err == nil && n > 0
	})
	r1 := mustColumn[int16](t, tx, b.names.Render(outboxsql.MySQLOwnedShardList), "r1")
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r2 := <-done
	if r2.err != nil {
		t.Fatal(r2.err)
	}
	if !slices.Equal(r1, shardRange(10, 20)) || !slices.Equal(r2.owned, shardRange(20, 25)) {
		t.Fatalf("r1 owns %v, r2 owns %v; want 10-19 and 20-24", r1, r2.owned)
	}

	// Free-running: rounds of both at once over every shard; what one
	// returned the other never does, while both are live.
	b.exec(t, `UPDATE outbox_shards SET owner = NULL`)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[int16]string{}
		errs = make(chan error, 2)
	)
	for i, owner := range []string{"r1", "r2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 15 {
				lo := int16((round*37 + i*61) % 200)
				owned, err := b.acquire(ctx, t, owner, shardRange(lo, lo+56))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, s := range owned {
					if o, ok := seen[s]; ok && o != owner {
						mu.Unlock()
						errs <- fmt.Errorf("shard %d returned to %s and to %s", s, o, owner)
						return
					}
					seen[s] = owner
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var owners int
	if err := b.db.QueryRow(`SELECT count(*) FROM outbox_shards WHERE owner IS NOT NULL`).Scan(&owners); err != nil {
		t.Fatal(err)
	}
	if owners != len(seen) {
		t.Fatalf("%d shards owned in the table, %d returned", owners, len(seen))
	}
}

// Releasing keeps the shards listed, leaving gives up all of them and the
// relay's row, and the owned count follows.
func TestMySQLReleaseAndLeaveShards(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.registerAs(t, "r1", "a")
	b.registerAs(t, "r2", "b")
	b.exec(t, `UPDATE outbox_shards SET owner = IF(shard < 4, 'r1', 'r2') WHERE shard < 6`)
	owned := func(owner string) int64 {
		return mustColumn[int64](t, b.db, b.names.Render(outboxsql.MySQLOwnedShards), outboxsql.MySQLOwnerArgs{Owner: owner}.Args()...)[0]
	}
	if got := owned("r1"); got != 4 {
		t.Fatalf("r1 owns %d, want 4", got)
	}
	keep := []int16{2, 5} // 5 is r2's: keeping it takes nothing
	if n := affected(t, b.db, outboxsql.MySQLReleaseShards(b.names, len(keep)), outboxsql.MySQLShardsArgs{Owner: "r1", Shards: keep}.Args()...); n != 3 {
		t.Fatalf("released %d, want 3", n)
	}
	if got := mustColumn[int16](t, b.db, b.names.Render(outboxsql.MySQLOwnedShardList), "r1"); !slices.Equal(got, []int16{2}) {
		t.Fatalf("r1 owns %v after keeping [2 5], want [2]", got)
	}
	if n := affected(t, b.db, outboxsql.MySQLReleaseShards(b.names, 0), outboxsql.MySQLShardsArgs{Owner: "r1"}.Args()...); n != 1 || owned("r1") != 0 {
		t.Fatalf("releasing all but none: %d released, %d left", n, owned("r1"))
	}
	if n := affected(t, b.db, b.names.Render(outboxsql.MySQLLeaveShards), outboxsql.MySQLOwnerArgs{Owner: "r2"}.Args()...); n != 2 || owned("r2") != 0 {
		t.Fatalf("r2 leaving: %d released, %d left", n, owned("r2"))
	}
	if n := affected(t, b.db, b.names.Render(outboxsql.MySQLLeaveRelay), outboxsql.MySQLOwnerArgs{Owner: "r2"}.Args()...); n != 1 {
		t.Fatalf("r2's row: %d deleted", n)
	}
	if got := b.relays(t); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("relays left: %v", got)
	}
}

// The live relays are listed by id, each with its name, or its id where
// the name is empty.
func TestMySQLLiveRelays(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.registerAs(t, "r2", "b")
	b.registerAs(t, "r1", "")
	rows, err := b.db.Query(b.names.Render(outboxsql.MySQLLiveRelays))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			t.Fatal(err)
		}
		got = append(got, id+"="+name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"r1=r1", "r2=b"}) {
		t.Fatalf("live relays: %v", got)
	}
}

// A shard is in handover while another live incarnation holds a row of it
// under a valid lease among the first rows a claim reads (first attempts
// and due retries); and nothing is while the incarnation is alone.
func TestMySQLShardsInHandover(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "me")
	shardOf := func(id int64) int16 {
		return mustColumn[int16](t, b.db, `SELECT shard FROM outbox WHERE id = ?`, id)[0]
	}
	// One aggregate per case, each of its own shard.
	cases := map[string]int64{}
	shards := map[int16]bool{}
	for _, c := range []string{"peer", "peer-retry", "ghost", "expired", "mine", "far"} {
		for i := 0; ; i++ {
			agg := fmt.Sprintf("%s-%d", c, i)
			id := b.write(t, agg, 1)[0]
			if s := shardOf(id); !shards[s] {
				shards[s], cases[c] = true, id
				break
			}
			b.exec(t, `DELETE FROM outbox WHERE id = ?`, id)
		}
	}
	lease := func(c, owner, expires string) {
		b.exec(t, `UPDATE outbox SET lease_owner = ?, lease_expires_at = `+expires+` WHERE id = ?`, outboxsql.MySQLLeaseKey(owner), cases[c])
	}
	lease("peer", "peer", "UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE")
	lease("peer-retry", "peer", "UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE")
	b.exec(t, `UPDATE outbox SET attempts = 1, retry_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?`, cases["peer-retry"])
	lease("ghost", "ghost", "UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE")
	lease("expired", "peer", "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND")
	lease("mine", "me", "UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE")
	// far's row lies beyond a window of 4 first attempts: move it last.
	b.exec(t, `UPDATE outbox SET id = id + 1000 WHERE id = ?`, cases["far"])
	cases["far"] += 1000
	lease("far", "peer", "UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE")

	var all []int16
	for s := range shards {
		all = append(all, s)
	}
	slices.Sort(all)
	handover := func(shards []int16) []int16 {
		args := outboxsql.MySQLHandoverArgs{Owner: "me", Shards: shards, Window: 4}
		return mustColumn[int16](t, b.db, outboxsql.MySQLShardsInHandover(b.names, len(shards)), args.Args()...)
	}
	if got := handover(all); len(got) != 0 {
		t.Fatalf("in handover with no other incarnation live: %v, want none", got)
	}
	// Alone, it reads nothing of the outbox, however many rows are there.
	// (MariaDB's plan would read nothing without the statement's test of
	// the relays table too: it joins from the relays table, whose one row
	// is the incarnation's own; MySQL 8's may materialize the windows
	// first.)
	b.bulkRows(t, 200, "bulk", "pending", "'"+outboxsql.MySQLNeverRetried+"'")
	ctx := context.Background()
	conn, err := b.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	before := handlerReads(t, conn)
	args := outboxsql.MySQLHandoverArgs{Owner: "me", Window: 100}
	if got := mustColumn[int16](t, conn, outboxsql.MySQLShardsInHandover(b.names, 0), args.Args()...); len(got) != 0 {
		t.Fatalf("alone: %v", got)
	}
	var reads int64
	for k, v := range handlerReads(t, conn) {
		reads += v - before[k]
	}
	t.Logf("alone: %d reads", reads)
	if reads > 20 {
		t.Fatalf("alone, with a window of 100 rows: %d reads, want those of the relays table only", reads)
	}
	b.exec(t, `DELETE FROM outbox WHERE aggregate_id LIKE 'bulk%'`)
	b.register(t, "peer")
	want := []int16{shardOf(cases["peer"]), shardOf(cases["peer-retry"])}
	slices.Sort(want)
	if got := handover(all); !slices.Equal(got, want) {
		t.Fatalf("in handover: %v, want %v (peer's first attempt and due retry)", got, want)
	}
	if got := handover(nil); !slices.Equal(got, want) {
		t.Fatalf("in handover, every shard: %v, want %v", got, want)
	}
	if got := handover([]int16{shardOf(cases["peer"])}); !slices.Equal(got, []int16{shardOf(cases["peer"])}) {
		t.Fatalf("in handover of peer's shard alone: %v", got)
	}
	if got := handover([]int16{shardOf(cases["far"])}); !slices.Equal(got, []int16{shardOf(cases["far"])}) {
		t.Fatalf("far's shard alone (its row first in that shard): %v", got)
	}
}

// prune runs MySQLPruneBatch and MySQLPrune, and returns the ids read and
// the rows deleted.
func (b *claimBundle) prune(t *testing.T, q querier, retention time.Duration, batch int, between func([]int64)) ([]int64, int64) {
	t.Helper()
	ids := mustColumn[int64](t, q, b.names.Render(outboxsql.MySQLPruneBatch), outboxsql.MySQLPruneArgs{Retention: retention, Batch: batch}.Args()...)
	if len(ids) == 0 {
		return nil, 0
	}
	if between != nil {
		between(ids)
	}
	return ids, affected(t, q, outboxsql.MySQLPrune(b.names, len(ids)), outboxsql.MySQLPruneDeleteArgs{IDs: ids, Retention: retention}.Args()...)
}

// Prune deletes published rows older than the retention, oldest first, a
// batch at a time, and nothing else; a row replayed between its two
// statements stays.
func TestMySQLPrune(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	// Published two days ago and more, the higher the id the older.
	b.bulkRows(t, 6, "old", "published", "'"+outboxsql.MySQLNeverRetried+"'")
	b.exec(t, `UPDATE outbox SET published_at = UTC_TIMESTAMP(6) - INTERVAL 2 DAY - INTERVAL id MINUTE`)
	old := mustColumn[int64](t, b.db, `SELECT id FROM outbox ORDER BY published_at`)
	b.bulkRows(t, 3, "new", "published", "'"+outboxsql.MySQLNeverRetried+"'")
	b.bulkRows(t, 2, "dead", "dead", "'"+outboxsql.MySQLNeverRetried+"'")
	b.write(t, "pending", 2)
	b.exec(t, `UPDATE outbox SET created_at = UTC_TIMESTAMP(6) - INTERVAL 9 DAY WHERE state <> 'published'`)

	ids, n := b.prune(t, b.db, 24*time.Hour, 2, nil)
	if !slices.Equal(ids, old[:2]) || n != 2 {
		t.Fatalf("first batch: read %v, deleted %d; want the two oldest %v", ids, n, old[:2])
	}
	// The next batch's oldest row replayed between the read and the delete.
	ids, n = b.prune(t, b.db, 24*time.Hour, 3, func(ids []int64) {
		b.exec(t, `UPDATE outbox SET state = 'pending', published_at = ? WHERE id = ?`, outboxsql.MySQLUnpublished, ids[0])
	})
	if !slices.Equal(ids, old[2:5]) || n != 2 {
		t.Fatalf("second batch: read %v, deleted %d; want %v read and 2 deleted", ids, n, old[2:5])
	}
	ids, n = b.prune(t, b.db, 24*time.Hour, 10, nil)
	if !slices.Equal(ids, old[5:]) || n != 1 {
		t.Fatalf("last batch: read %v, deleted %d; want %v", ids, n, old[5:])
	}
	var published, other int
	if err := b.db.QueryRow(`SELECT COALESCE(SUM(state = 'published'), 0), COALESCE(SUM(state <> 'published'), 0) FROM outbox`).Scan(&published, &other); err != nil {
		t.Fatal(err)
	}
	if published != 3 || other != 5 {
		t.Fatalf("left: %d published, %d others; want 3 (recent) and 5 (2 dead, 2 pending, 1 replayed)", published, other)
	}
}

// The stats readings on a small table of known rows: the counts, capped,
// and the two lags.
func TestMySQLStats(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	// row inserts one row of aggregate agg, created ago, with not_before
	// nb and retry_at retry (SQL expressions), in state.
	row := func(agg, state, ago, nb, retry string) {
		b.exec(t, `INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, headers, created_at, not_before, retry_at, state, published_at)
			VALUES (UUID(), 'orders', ?, 'order.placed', '{}', '{}', UTC_TIMESTAMP(6) - INTERVAL `+ago+`, `+nb+`, `+retry+`, ?, IF(? = 'published', UTC_TIMESTAMP(6), '`+outboxsql.MySQLUnpublished+`'))`,
			agg, state, state)
	}
	never := "'" + outboxsql.MySQLNeverRetried + "'"
	// x: scheduled an hour ahead (as MySQLInsert writes it), then a row
	// held behind it, the oldest unpublished.
	row("x", "pending", "3 HOUR", "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR", "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR")
	row("x", "pending", "5 HOUR", "NULL", never)
	// z: a row created 4 hours ago behind one due 30 minutes ago and
	// failed since (in backoff): it counts from that one's not_before.
	row("z", "pending", "5 HOUR", "UTC_TIMESTAMP(6) - INTERVAL 30 MINUTE", "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR")
	b.exec(t, `UPDATE outbox SET created_at = UTC_TIMESTAMP(6) - INTERVAL 10 MINUTE WHERE aggregate_id = 'z'`)
	row("z", "pending", "4 HOUR", "NULL", never)
	row("y", "pending", "1 HOUR", "NULL", never)
	for range 3 {
		row("d", "dead", "6 HOUR", "NULL", never)
	}
	row("p", "published", "7 HOUR", "NULL", never)

	var oldest, due, now outboxsql.MySQLTime
	if err := b.db.QueryRow(b.names.Render(outboxsql.MySQLStatsLags)).Scan(&oldest, &due, &now); err != nil {
		t.Fatal(err)
	}
	near := func(what string, got outboxsql.MySQLTime, lag time.Duration) {
		t.Helper()
		if !got.Valid || (now.Time.Sub(got.Time)-lag).Abs() > time.Minute {
			t.Fatalf("%s: %v at %v, want about %v ago", what, got, now.Time, lag)
		}
	}
	near("oldest unpublished", oldest, 5*time.Hour)
	near("oldest due not held", due, 30*time.Minute)

	counts := func(cap int) (backlog, scheduled, dead int64) {
		if err := b.db.QueryRow(b.names.Render(outboxsql.MySQLStatsBacklogScheduled), outboxsql.MySQLCountArgs{Cap: cap, Counts: 2}.Args()...).
			Scan(&backlog, &scheduled); err != nil {
			t.Fatal(err)
		}
		if err := b.db.QueryRow(b.names.Render(outboxsql.MySQLStatsDead), outboxsql.MySQLCountArgs{Cap: cap, Counts: 1}.Args()...).Scan(&dead); err != nil {
			t.Fatal(err)
		}
		return backlog, scheduled, dead
	}
	if bl, sc, d := counts(100); bl != 5 || sc != 1 || d != 3 {
		t.Fatalf("cap 100: backlog %d, scheduled %d, dead %d; want 5, 1, 3", bl, sc, d)
	}
	if bl, sc, d := counts(2); bl != 2 || sc != 1 || d != 2 {
		t.Fatalf("cap 2: backlog %d, scheduled %d, dead %d; want 2, 1, 2", bl, sc, d)
	}

	// No retry left: the first attempts' lane alone.
	b.exec(t, `DELETE FROM outbox WHERE lane = 2`)
	if err := b.db.QueryRow(b.names.Render(outboxsql.MySQLStatsLags)).Scan(&oldest, &due, &now); err != nil {
		t.Fatal(err)
	}
	near("oldest unpublished, first attempts alone", oldest, 5*time.Hour)
	near("oldest due, first attempts alone", due, 5*time.Hour)

	// Nothing unpublished: no lag.
	b.exec(t, `DELETE FROM outbox WHERE state = 'pending'`)
	if err := b.db.QueryRow(b.names.Render(outboxsql.MySQLStatsLags)).Scan(&oldest, &due, &now); err != nil {
		t.Fatal(err)
	}
	if oldest.Valid || due.Valid {
		t.Fatalf("with nothing unpublished: oldest %v, due %v; want NULL", oldest, due)
	}
}

// The servers are told apart by their version string, and each one's
// statement time limit and the lock waits take effect.
func TestMySQLTimeoutStatements(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	ctx := context.Background()
	var version string
	if err := b.db.QueryRow(outboxsql.DialectProbe).Scan(&version); err != nil {
		t.Fatal(err)
	}
	server := outboxsql.MySQLServerOf(version)
	if server != outboxsql.ServerMariaDB {
		t.Fatalf("%q: not told to be MariaDB", version)
	}
	if outboxsql.MySQLServerOf("8.0.36") != outboxsql.ServerMySQL {
		t.Fatal("MySQL's version string told to be MariaDB")
	}
	session := func(t *testing.T) *sql.Conn {
		conn, err := b.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Its settings are the session's: discard it rather than give it
		// back to the pool.
		t.Cleanup(func() {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			conn.Close()
		})
		return conn
	}

	t.Run("statement time", func(t *testing.T) {
		conn := session(t)
		if _, err := conn.ExecContext(ctx, server.StatementTime(), outboxsql.MySQLStatementTimeArgs{Server: server, Limit: 200 * time.Millisecond}.Args()...); err != nil {
			t.Fatal(err)
		}
		// Bounded by the context too, so a limit not set fails rather than
		// stalls the test.
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		var slept int
		err := conn.QueryRowContext(sctx, `SELECT SLEEP(3)`).Scan(&slept)
		if outboxsql.MySQLErrorNumber(err) != 1969 {
			t.Fatalf("a statement over the 200ms limit = %v after %v, want error 1969", err, time.Since(start))
		}
		if _, err := conn.ExecContext(ctx, server.StatementTime(), outboxsql.MySQLStatementTimeArgs{Server: server}.Args()...); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRowContext(sctx, `SELECT SLEEP(0.3)`).Scan(&slept); err != nil || slept != 0 {
			t.Fatalf("with the limit off: %v", err)
		}
	})

	t.Run("lock waits", func(t *testing.T) {
		conn := session(t)
		if _, err := conn.ExecContext(ctx, outboxsql.MySQLLockWaits, outboxsql.MySQLLockWaitsArgs{Wait: time.Second}.Args()...); err != nil {
			t.Fatal(err)
		}
		holder := readCommitted(t, b.db)
		if _, err := holder.Exec(`SELECT id FROM outbox_relays WHERE id = 'r1' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		// Far below both servers' defaults (50s for rows, a day for
		// metadata): a setting not taken fails on the context instead.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := conn.ExecContext(wctx, b.names.Render(outboxsql.MySQLHeartbeat), "r1")
		if outboxsql.MySQLErrorNumber(err) != 1205 {
			t.Fatalf("a row lock held past innodb_lock_wait_timeout = %v, want error 1205", err)
		}
		// The holder's transaction keeps the table's metadata lock, which
		// DDL waits for.
		_, err = conn.ExecContext(wctx, `ALTER TABLE outbox_relays COMMENT = 'x'`)
		if outboxsql.MySQLErrorNumber(err) != 1205 {
			t.Fatalf("a metadata lock held past lock_wait_timeout = %v, want error 1205", err)
		}
	})
}
