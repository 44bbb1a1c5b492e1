package engines_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the MySQL engine's driver

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/mysqlclaim"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// The claim cycle on MySQL (internal/mysqlclaim), on the MariaDB of
// .ci/services: each test proves one rule of the claim's contract
// (internal/outboxsql/claim_mysql.md).

type claimBundle struct {
	db    *sql.DB
	names outboxsql.Names
	w     *txoutbox.Writer
}

func setupMySQLClaim(t *testing.T) *claimBundle {
	t.Helper()
	testkit.MySQLURL(t)
	db := testkit.NewOutboxOn(t, testkit.MySQL)
	n, err := outboxsql.MySQLNamesFor("", "")
	if err != nil {
		t.Fatal(err)
	}
	return &claimBundle{db: db.SQL, names: n, w: db.Writer(t)}
}

// register puts incarnations in the relays table.
func (b *claimBundle) register(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := b.db.Exec(`INSERT INTO outbox_relays (id, started_at, heartbeat_at) VALUES (?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`, id); err != nil {
			t.Fatal(err)
		}
	}
}

// write commits k events of aggregate agg in one transaction and returns
// their ids.
func (b *claimBundle) write(t testing.TB, agg string, k int) []int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	events := make([]txoutbox.Event, k)
	for i := range events {
		events[i] = event(agg, i)
	}
	if err := b.w.Write(ctx, tx, events...); err != nil {
		t.Fatal(err)
	}
	ids := mustColumn[int64](t, tx, `SELECT id FROM outbox WHERE aggregate_id = ? ORDER BY id DESC LIMIT ?`, agg, k)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

func (b *claimBundle) claim(t testing.TB, owner string, limit int) mysqlclaim.Claimed {
	t.Helper()
	c, err := mysqlclaim.Claim(context.Background(), b.db, b.names, mysqlclaim.Params{Owner: owner, Limit: limit, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (b *claimBundle) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := b.db.Exec(query, args...); err != nil {
		t.Fatal(err)
	}
}

// anyDue is MySQLAnyDue's answer, read on q: the relay's idle poll.
func (b *claimBundle) anyDue(t testing.TB, q querier) bool {
	t.Helper()
	return mustColumn[bool](t, q, b.names.Render(outboxsql.MySQLAnyDue))[0]
}

func claimedIDs(c mysqlclaim.Claimed) []int64 {
	ids := make([]int64, len(c.Rows))
	for i, r := range c.Rows {
		ids[i] = r.ID
	}
	return ids
}

func wantClaimed(t *testing.T, what string, c mysqlclaim.Claimed, want ...int64) {
	t.Helper()
	if got := claimedIDs(c); !slices.Equal(got, want) {
		t.Fatalf("%s: claimed %v, want %v", what, got, want)
	}
}

// A row another session holds locked (an operator, a peer's claim)
// holds back its aggregate's later rows, not other aggregates'.
func TestMySQLClaimLockedRowHoldsBackItsAggregate(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	a := b.write(t, "a", 2)
	c := b.write(t, "c", 2)

	tx, err := b.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`SELECT id FROM outbox WHERE id = ? FOR UPDATE`, a[0]); err != nil {
		t.Fatal(err)
	}
	wantClaimed(t, "a's first row locked elsewhere", b.claim(t, "r1", 10), c...)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	wantClaimed(t, "the lock gone", b.claim(t, "r1", 10), a...)
}

// A row in backoff holds back its aggregate's later rows; once due it is
// claimed with them.
func TestMySQLClaimBackoffHoldsBack(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	a := b.write(t, "a", 3)
	first := b.claim(t, "r1", 1)
	wantClaimed(t, "the first row", first, a[0])
	out, err := mysqlclaim.Fail(context.Background(), b.db, b.names, 5, []mysqlclaim.Failure{
		{ID: a[0], Owner: "r1", Version: first.Version, Err: "broker down", Delay: time.Hour}})
	if err != nil || len(out) != 1 || out[0].State != "pending" {
		t.Fatalf("Fail = %v, %v", out, err)
	}
	c := b.write(t, "c", 1)
	wantClaimed(t, "a's first row in backoff", b.claim(t, "r1", 10), c...)
	b.exec(t, `UPDATE outbox SET retry_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?`, a[0])
	wantClaimed(t, "the backoff over", b.claim(t, "r1", 10), a...)
}

// A row another live incarnation holds holds back its aggregate; it is
// taken over once its lease expires, or once its holder leaves the
// relays table.
func TestMySQLClaimOtherIncarnationHoldsBackUntilTakenOver(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"lease expired", "owner left"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			b := setupMySQLClaim(t)
			b.register(t, "r1", "r2")
			a := b.write(t, "a", 2)
			c := b.write(t, "c", 1)
			wantClaimed(t, "r1's first claim", b.claim(t, "r1", 1), a[0])
			wantClaimed(t, "r2 while r1 holds a's first row", b.claim(t, "r2", 10), c...)
			if how == "lease expired" {
				b.exec(t, `UPDATE outbox SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?`, a[0])
			} else {
				b.exec(t, `DELETE FROM outbox_relays WHERE id = 'r1'`)
			}
			wantClaimed(t, "r2 after "+how, b.claim(t, "r2", 10), a...)
		})
	}
}

// The rows the incarnation itself holds do not hold back its own claim;
// and an incarnation not in the relays table takes nothing.
func TestMySQLClaimOwnHeldRowsDoNotHoldBack(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	a := b.write(t, "a", 3)
	wantClaimed(t, "first", b.claim(t, "r1", 1), a[0])
	wantClaimed(t, "second, a's first row held by r1", b.claim(t, "r1", 1), a[1])
	wantClaimed(t, "third", b.claim(t, "r1", 5), a[2])
	b.write(t, "c", 1)
	wantClaimed(t, "an incarnation not registered", b.claim(t, "ghost", 5))
}

// A dead row does not hold back its aggregate.
func TestMySQLClaimDeadRowDoesNotHoldBack(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	a := b.write(t, "a", 2)
	first := b.claim(t, "r1", 1)
	out, err := mysqlclaim.Fail(context.Background(), b.db, b.names, 1, []mysqlclaim.Failure{
		{ID: a[0], Owner: "r1", Version: first.Version, Err: "poison", Permanent: true}})
	if err != nil || len(out) != 1 || out[0].State != "dead" {
		t.Fatalf("Fail = %v, %v; want the row dead", out, err)
	}
	wantClaimed(t, "behind a dead row", b.claim(t, "r1", 10), a[1])
}

// An uncommitted insert is not claimed, and does not make the claim wait.
func TestMySQLClaimUncommittedInsertNotClaimed(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	ctx := context.Background()
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := b.w.Write(ctx, tx, event("a", 1)); err != nil {
		t.Fatal(err)
	}
	c := b.write(t, "c", 1)
	wantClaimed(t, "with a's row uncommitted", b.claim(t, "r1", 10), c...)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := b.claim(t, "r1", 10); len(got.Rows) != 1 || got.Rows[0].AggregateID != "a" {
		t.Fatalf("after the commit: claimed %+v, want a's row", got.Rows)
	}
}

// The claim takes payload bytes up to its budget, and one row however
// large.
func TestMySQLClaimByteBudget(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	a := b.write(t, "a", 4) // payloads of 7 bytes: {"n":0}
	claim := func(bytes int64) []int64 {
		c, err := mysqlclaim.Claim(context.Background(), b.db, b.names, mysqlclaim.Params{Owner: "r1", Limit: 10, Lease: time.Minute, Bytes: bytes})
		if err != nil {
			t.Fatal(err)
		}
		return claimedIDs(c)
	}
	if got := claim(1); !slices.Equal(got, a[:1]) {
		t.Fatalf("budget 1 byte: claimed %v, want the first row alone", got)
	}
	if got := claim(14); !slices.Equal(got, a[1:3]) {
		t.Fatalf("budget 14 bytes: claimed %v, want two rows", got)
	}
}

// Two incarnations claiming at once while writers commit: no row is taken
// twice, every row is taken, and each aggregate's rows are taken in id
// order across both.
func TestMySQLClaimConcurrentClaimsTakeEachRowOnceInOrder(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	owners := []string{"r1", "r2"}
	b.register(t, owners...)
	const writers, aggregates, perAggregate = 4, 10, 12 // per writer
	total := writers * aggregates * perAggregate
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var (
		mu    sync.Mutex
		taken = map[string][]int64{} // per aggregate, in the order claimed
		count int
	)
	writeErr := make(chan error, writers)
	for w := range writers {
		go func() {
			// Each writer commits its aggregates' events one at a time, so
			// each aggregate's rows commit in id order (the precondition).
			for i := range perAggregate {
				for a := range aggregates {
					tx, err := b.db.BeginTx(ctx, nil)
					if err != nil {
						writeErr <- err
						return
					}
					if err := b.w.Write(ctx, tx, event(fmt.Sprintf("w%d-a%d", w, a), i)); err != nil {
						tx.Rollback()
						writeErr <- err
						return
					}
					if err := tx.Commit(); err != nil {
						writeErr <- err
						return
					}
				}
			}
			writeErr <- nil
		}()
	}
	claimErr := make(chan error, len(owners))
	for _, owner := range owners {
		go func() {
			claimErr <- func() error {
				for {
					mu.Lock()
					done := count == total
					mu.Unlock()
					if done {
						return nil
					}
					c, err := mysqlclaim.Claim(ctx, b.db, b.names, mysqlclaim.Params{Owner: owner, Limit: 7, Lease: time.Minute})
					if err != nil {
						return err
					}
					mu.Lock()
					for _, r := range c.Rows {
						taken[r.AggregateID] = append(taken[r.AggregateID], r.ID)
						count++
					}
					mu.Unlock()
					if len(c.Rows) == 0 {
						continue
					}
					// Marked after it was recorded: no other claim takes the
					// aggregate's next row before.
					if k, err := mysqlclaim.Mark(ctx, b.db, b.names, owner, c.Version, claimedIDs(c)); err != nil || k != int64(len(c.Rows)) {
						return fmt.Errorf("mark %d rows: %d, %v", len(c.Rows), k, err)
					}
				}
			}()
		}()
	}
	for range writers {
		if err := <-writeErr; err != nil {
			t.Fatal(err)
		}
	}
	for range owners {
		if err := <-claimErr; err != nil {
			t.Fatal(err)
		}
	}
	seen := map[int64]bool{}
	for agg, ids := range taken {
		if !slices.IsSorted(ids) {
			t.Errorf("aggregate %s taken out of order: %v", agg, ids)
		}
		for _, id := range ids {
			if seen[id] {
				t.Errorf("row %d taken twice", id)
			}
			seen[id] = true
		}
	}
	if n := countRows(t, b.db, `SELECT count(*) FROM outbox WHERE state = 'published'`); n != total || len(seen) != total {
		t.Fatalf("%d rows published, %d taken, want %d", n, len(seen), total)
	}
}

// A mark with a stale version (the row claimed again since) or another
// owner changes nothing; Release is fenced the same way.
func TestMySQLMarkIsFenced(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	ctx := context.Background()
	a := b.write(t, "a", 1)
	old := b.claim(t, "r1", 1)
	b.exec(t, `UPDATE outbox SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?`, a[0])
	cur, err := mysqlclaim.Claim(ctx, b.db, b.names, mysqlclaim.Params{Owner: "r1", Limit: 1, Lease: time.Minute, After: old.Version})
	if err != nil {
		t.Fatal(err)
	}
	wantClaimed(t, "claimed again", cur, a[0])
	if !cur.Version.After(old.Version) {
		t.Fatalf("versions %s then %s, want increasing", old.Version, cur.Version)
	}
	for _, stale := range []struct {
		owner   string
		version time.Time
	}{{"r1", old.Version}, {"r2", cur.Version}} {
		if k, err := mysqlclaim.Mark(ctx, b.db, b.names, stale.owner, stale.version, a); err != nil || k != 0 {
			t.Fatalf("a stale mark (%s, %s) marked %d, %v", stale.owner, stale.version, k, err)
		}
		if k, err := mysqlclaim.Release(ctx, b.db, b.names, stale.owner, stale.version, a); err != nil || k != 0 {
			t.Fatalf("a stale release (%s, %s) released %d, %v", stale.owner, stale.version, k, err)
		}
	}
	if n := countRows(t, b.db, `SELECT count(*) FROM outbox WHERE state = 'published'`); n != 0 {
		t.Fatal("a stale mark published the row")
	}
	if k, err := mysqlclaim.Mark(ctx, b.db, b.names, "r1", cur.Version, a); err != nil || k != 1 {
		t.Fatalf("the current mark marked %d, %v", k, err)
	}
}

// Release gives the rows back due at once, their attempts unchanged.
func TestMySQLRelease(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1", "r2")
	a := b.write(t, "a", 2)
	c := b.claim(t, "r1", 10)
	if k, err := mysqlclaim.Release(context.Background(), b.db, b.names, "r1", c.Version, a); err != nil || k != 2 {
		t.Fatalf("Release = %d, %v", k, err)
	}
	got := b.claim(t, "r2", 10)
	wantClaimed(t, "after the release", got, a...)
	if got.Rows[0].Attempts != 0 {
		t.Fatalf("attempts = %d after a release, want 0", got.Rows[0].Attempts)
	}
}

// Fail backs a row off, counting the attempt, and makes it dead at the
// most attempts only for a permanent failure.
func TestMySQLFailBacksOffAndMakesDead(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	ctx := context.Background()
	a := b.write(t, "a", 1)
	fail := func(permanent bool) string {
		t.Helper()
		b.exec(t, `UPDATE outbox SET retry_at = LEAST(retry_at, UTC_TIMESTAMP(6)) WHERE id = ?`, a[0])
		c := b.claim(t, "r1", 1)
		wantClaimed(t, "the retry", c, a[0])
		out, err := mysqlclaim.Fail(ctx, b.db, b.names, 2, []mysqlclaim.Failure{
			{ID: a[0], Owner: "r1", Version: c.Version, Err: "nope", Permanent: permanent, Delay: time.Hour}})
		if err != nil || len(out) != 1 {
			t.Fatalf("Fail = %v, %v", out, err)
		}
		return out[0].State
	}
	if s := fail(false); s != "pending" {
		t.Fatalf("after one failure: %s", s)
	}
	var (
		attempts int
		backoff  float64
		lastErr  string
	)
	if err := b.db.QueryRow(`SELECT attempts, TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), retry_at), last_error FROM outbox WHERE id = ?`, a[0]).
		Scan(&attempts, &backoff, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || backoff < 3500 || backoff > 3600 || lastErr != "nope" {
		t.Fatalf("after one failure: attempts %d, retry in %vs, last error %q", attempts, backoff, lastErr)
	}
	wantClaimed(t, "in backoff", b.claim(t, "r1", 1))
	if s := fail(false); s != "pending" {
		t.Fatalf("a transient failure at the most attempts: %s, want pending", s)
	}
	if s := fail(true); s != "dead" {
		t.Fatalf("a permanent failure at the most attempts: %s, want dead", s)
	}
	if out, err := mysqlclaim.Fail(ctx, b.db, b.names, 2, []mysqlclaim.Failure{
		{ID: a[0], Owner: "r1", Version: time.Now(), Err: "late"}}); err != nil || len(out) != 0 {
		t.Fatalf("a failure of a row no longer held = %v, %v; want none recorded", out, err)
	}
}

// A claim waits while an operator's transaction holds the claim gate (the
// floor's row FOR UPDATE), and sees what it committed.
func TestMySQLClaimWaitsForTheGate(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	a := b.write(t, "a", 1)
	ctx := context.Background()
	op, err := b.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Rollback()
	if _, err := op.Exec(`SELECT floor FROM outbox_claim_floor WHERE one = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	// The operator's change: the row put in backoff, committed with the gate.
	if _, err := op.Exec(`UPDATE outbox SET retry_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE id = ?`, a[0]); err != nil {
		t.Fatal(err)
	}
	// LockWait bounds the wait.
	_, err = mysqlclaim.Claim(ctx, b.db, b.names, mysqlclaim.Params{Owner: "r1", Limit: 10, Lease: time.Minute, LockWait: time.Second})
	if err == nil || !strings.Contains(err.Error(), "1205") {
		t.Fatalf("a claim with LockWait 1s while the gate is held = %v, want a lock wait timeout (1205)", err)
	}
	type result struct {
		c   mysqlclaim.Claimed
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := mysqlclaim.Claim(ctx, b.db, b.names, mysqlclaim.Params{Owner: "r1", Limit: 10, Lease: time.Minute})
		done <- result{c, err}
	}()
	testkit.WaitFor(t, 10*time.Second, "the claim waiting on the gate", func() bool {
		select {
		case r := <-done:
			t.Fatalf("the claim ran while the gate was held: %v, %v", claimedIDs(r.c), r.err)
		default:
		}
		// Its gate read, running (this query's own text matches too:
		// its session is left out). (information_schema.innodb_trx, which
		// shows lock waits, is a cache InnoDB refreshes only once it has
		// not been read for 0.1s: polled faster, it never changes.)
		var n int
		err := b.db.QueryRow(`SELECT count(*) FROM information_schema.processlist
			WHERE db = DATABASE() AND id <> CONNECTION_ID() AND info LIKE '%claim_floor%LOCK IN SHARE MODE%'`).Scan(&n)
		return err == nil && n > 0
	})
	if err := op.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.c.Rows) != 0 {
		t.Fatalf("the claim after the gate: %v, %v; want nothing (the row in backoff)", claimedIDs(r.c), r.err)
	}
}

// bulkRows inserts k rows (up to 10,000,000) of state state, each of its
// own aggregate, with retry_at retryAt (an SQL expression), in one
// statement: INSERT ... SELECT over a cross join of digits
// (testkit.MySQLNumbers).
func (b *claimBundle) bulkRows(t *testing.T, k int, prefix, state, retryAt string) {
	t.Helper()
	if k > 10_000_000 {
		t.Fatalf("bulkRows: %d rows, more than 10,000,000", k)
	}
	n, from := testkit.MySQLNumbers(k)
	b.exec(t, `INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, headers, created_at, state, attempts, retry_at, published_at)
		SELECT UUID(), 'orders', CONCAT(?, n), 'order.placed', '{}', '{}', UTC_TIMESTAMP(6), ?, IF(? = 'published', 0, 1), `+retryAt+`,
		       IF(? = 'published', UTC_TIMESTAMP(6), '`+outboxsql.MySQLUnpublished+`')
		FROM (SELECT `+n+` AS n FROM `+from+`) s
		WHERE n < ?`, prefix, state, state, state, k)
}

// drain runs stmt on conn and reads every row it returns.
func drain(t *testing.T, conn *sql.Conn, stmt string, args []any) {
	t.Helper()
	rows, err := conn.QueryContext(context.Background(), stmt, args...)
	testkit.ScanAll(t, rows, err)
}

// handlerReads is the session's row reads so far: the Handler_read_*
// counters, which count index entries and rows read, whatever the plan.
func handlerReads(t *testing.T, conn *sql.Conn) map[string]int64 {
	t.Helper()
	rows, err := conn.QueryContext(context.Background(), `SHOW SESSION STATUS LIKE 'Handler_read%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			name string
			v    int64
		)
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		out[name] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// readsOf is the row reads (Handler_read_* deltas, summed) of what fn
// runs on conn, and their breakdown.
func readsOf(t *testing.T, conn *sql.Conn, fn func()) (total int64, reads map[string]int64) {
	t.Helper()
	before := handlerReads(t, conn)
	fn()
	after := handlerReads(t, conn)
	reads = map[string]int64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			reads[k] = d
			total += d
		}
	}
	return total, reads
}

// The claim cycle reads its batch, not the table: the row reads of the
// idle poll (MySQLAnyDue, with nothing due and with rows due), of a claim
// of 10 rows (its gate included), of their mark and of a prune batch of
// 20, and of the other readers of the claim's index (a handover check,
// the operators' handovers and counts, the stats, each of a window or
// cap of 10), are the same with 1,000,000 published rows retained and 50,000 rows
// in backoff, each of its own aggregate, as with a tenth of each. The rows
// are written published, as the mark's UPDATE leaves them once purge has
// removed their old index entries: the counters do not count the
// delete-marked entries a walk steps over before then (claim_mysql.md).
func TestMySQLClaimCycleCostIsItsBatch(t *testing.T) {
	testkit.Long(t, "the MySQL claim cycle's size test (1,000,000 rows)")
	t.Parallel()
	const (
		batch = 10
		prune = 20
	)
	type size struct{ published, backoff int }
	cost := func(t *testing.T, sz size) (totals map[string]int64, reads map[string]map[string]int64) {
		b := setupMySQLClaim(t)
		b.register(t, "r1")
		// Published two days ago, for the prune batch; then the retained
		// ones and the rows in backoff, as Fail leaves them, ahead of the
		// due rows in id order.
		b.bulkRows(t, prune, "old", "published", "'"+outboxsql.MySQLNeverRetried+"'")
		b.exec(t, `UPDATE outbox SET published_at = UTC_TIMESTAMP(6) - INTERVAL 2 DAY`)
		b.bulkRows(t, sz.published, "p", "published", "'"+outboxsql.MySQLNeverRetried+"'")
		b.bulkRows(t, sz.backoff, "b", "pending", "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR")
		ctx := context.Background()
		conn, err := b.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		totals, reads = map[string]int64{}, map[string]map[string]int64{}
		measure := func(what string, fn func()) {
			t.Helper()
			totals[what], reads[what] = readsOf(t, conn, fn)
		}
		anyDue := func(want bool) func() {
			return func() {
				if due := b.anyDue(t, conn); due != want {
					t.Fatalf("any due = %t, want %t", due, want)
				}
			}
		}
		measure("idle poll, nothing due", anyDue(false))
		// Due retries and first attempts.
		b.bulkRows(t, 50, "r", "pending", "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND")
		for i := range 20 {
			b.write(t, fmt.Sprintf("due%d", i), 2)
		}
		measure("idle poll, rows due", anyDue(true))
		var c mysqlclaim.Claimed
		measure("claim", func() {
			if c, err = mysqlclaim.Claim(ctx, conn, b.names, mysqlclaim.Params{Owner: "r1", Limit: batch, Lease: time.Minute}); err != nil {
				t.Fatal(err)
			}
		})
		if len(c.Rows) != batch {
			t.Fatalf("claimed %d rows, want %d", len(c.Rows), batch)
		}
		// The readers of the claim's index beside the claim, with the
		// batch leased: a new owner's handover check (a peer live), the
		// operators' handovers and counts, and the stats, each of its
		// window or cap.
		b.register(t, "r2")
		measure("handover check", func() {
			drain(t, conn, outboxsql.MySQLShardsInHandover(b.names, 0), outboxsql.MySQLHandoverArgs{Owner: "r2", Window: batch}.Args())
		})
		measure("operators' handovers", func() {
			drain(t, conn, b.names.Render(outboxsql.MySQLOpsHandovers), outboxsql.MySQLHandoversArgs{Window: batch}.Args())
		})
		measure("operators' counts", func() {
			drain(t, conn, b.names.Render(outboxsql.MySQLOpsCounts), outboxsql.MySQLCountArgs{Cap: batch, Counts: 3}.Args())
		})
		measure("stats", func() {
			drain(t, conn, b.names.Render(outboxsql.MySQLStats), outboxsql.MySQLCountArgs{Cap: batch, Counts: 3}.Args())
		})
		measure("mark", func() {
			if k, err := mysqlclaim.Mark(ctx, conn, b.names, "r1", c.Version, claimedIDs(c)); err != nil || k != batch {
				t.Fatalf("marked %d, %v; want %d", k, err, batch)
			}
		})
		measure("prune", func() {
			if ids, n := b.prune(t, conn, 24*time.Hour, prune, nil); len(ids) != prune || n != prune {
				t.Fatalf("pruned %d of %d read, want %d", n, len(ids), prune)
			}
		})
		return totals, reads
	}
	small, large := size{100_000, 5_000}, size{1_000_000, 50_000}
	var (
		totals [2]map[string]int64
		reads  [2]map[string]map[string]int64
	)
	for i, sz := range []size{small, large} {
		// One at a time: each loads the shared server for a while.
		if !t.Run(fmt.Sprintf("%d published, %d in backoff", sz.published, sz.backoff), func(t *testing.T) {
			totals[i], reads[i] = cost(t, sz)
		}) {
			return
		}
	}
	for _, what := range []string{"idle poll, nothing due", "idle poll, rows due", "claim", "handover check",
		"operators' handovers", "operators' counts", "stats", "mark", "prune"} {
		s, l := totals[0][what], totals[1][what]
		t.Logf("%s: %d row reads %v at %d published and %d in backoff, %d %v at %d and %d",
			what, s, reads[0][what], small.published, small.backoff, l, reads[1][what], large.published, large.backoff)
		// A few reads of slack: SHOW STATUS's own, which do not grow.
		if l > s+5 {
			t.Errorf("%s read %d rows and entries with 10x the published rows and rows in backoff, %d without: it walks them", what, l, s)
		}
	}
}

// A retry outside the claim's window of retries (read in retry_at order)
// holds back its aggregate's later rows, first attempts and retries, and
// they do not fill the window.
func TestMySQLClaimRetriesOutsideTheWindowHoldBack(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	a := b.write(t, "a", 3)
	c := b.write(t, "c", 1)
	// a's first and last rows are due retries, the last due first: a
	// window of one retry holds a's last row, not its first.
	b.exec(t, `UPDATE outbox SET attempts = 1, retry_at = UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE WHERE id = ?`, a[0])
	b.exec(t, `UPDATE outbox SET attempts = 1, retry_at = UTC_TIMESTAMP(6) - INTERVAL 1 HOUR WHERE id = ?`, a[2])
	wantClaimed(t, "a window of one", b.claim(t, "r1", 1))
	wantClaimed(t, "a window of two", b.claim(t, "r1", 2), a[0], a[1])
	wantClaimed(t, "then", b.claim(t, "r1", 10), a[2], c[0])

	// A first attempt behind a retry outside the window does not fill the
	// window: the retry of another aggregate is claimed.
	d := b.write(t, "d", 2)
	e := b.write(t, "e", 1)
	b.exec(t, `UPDATE outbox SET attempts = 1, retry_at = UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE WHERE id = ?`, d[0])
	b.exec(t, `UPDATE outbox SET attempts = 1, retry_at = UTC_TIMESTAMP(6) - INTERVAL 1 HOUR WHERE id = ?`, e[0])
	wantClaimed(t, "d's retry outside the window", b.claim(t, "r1", 1), e...)
	wantClaimed(t, "then d's rows", b.claim(t, "r1", 10), d...)
}

// A claim's version is later than Params.After, the incarnation's
// previous claim's, even when the database's clock is behind it.
func TestMySQLClaimVersionAfterPrevious(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	b.write(t, "a", 1)
	after := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	c, err := mysqlclaim.Claim(context.Background(), b.db, b.names,
		mysqlclaim.Params{Owner: "r1", Limit: 10, Lease: time.Minute, After: after})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rows) != 1 || !c.Version.After(after) {
		t.Fatalf("claim after %v: %d rows, version %v; want 1 row, a later version", after, len(c.Rows), c.Version)
	}
}

// FailTx records any number of failures in the caller's transaction:
// more than one statement's worth of ids (5000), and nothing once the
// caller rolls back.
func TestMySQLFailTxManyInCallersTransaction(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	const k = 5003
	b.bulkRows(t, k, "agg-", "pending", "'"+outboxsql.MySQLNeverRetried+"'")
	ctx := context.Background()
	var failures []mysqlclaim.Failure
	for len(failures) < k {
		c := b.claim(t, "r1", mysqlclaim.MaxLimit)
		if len(c.Rows) == 0 {
			t.Fatalf("claimed %d of %d rows", len(failures), k)
		}
		for _, r := range c.Rows {
			failures = append(failures, mysqlclaim.Failure{ID: r.ID, Owner: "r1", Version: c.Version, Err: "e", Delay: time.Hour})
		}
	}
	run := func(commit bool) []mysqlclaim.Outcome {
		tx := readCommitted(t, b.db)
		out, err := mysqlclaim.FailTx(ctx, tx, b.names, 3, failures)
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		} else if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := run(false); len(out) != k {
		t.Fatalf("FailTx recorded %d of %d failures", len(out), k)
	}
	if n := mustColumn[int](t, b.db, `SELECT COUNT(*) FROM outbox WHERE last_error = 'e'`)[0]; n != 0 {
		t.Fatalf("%d rows failed after the caller's rollback, want 0", n)
	}
	out := run(true)
	for _, o := range out {
		if o.State != "pending" {
			t.Fatalf("row %d: %q after a transient failure, want pending", o.ID, o.State)
		}
	}
	if n := mustColumn[int](t, b.db, `SELECT COUNT(*) FROM outbox WHERE last_error = 'e' AND retry_at > UTC_TIMESTAMP(6)`)[0]; n != k {
		t.Fatalf("%d rows failed once after the commit, want %d", n, k)
	}
}

// MySQLAnyDue, the relay's idle poll on MySQL, is true whenever a claim
// could take a row (a first attempt, a retry or scheduled event whose
// time has come, a row held by a live lease too: it errs towards
// claiming), and false when none is: an empty outbox, rows published or
// dead, rows in backoff, events scheduled for later.
func TestMySQLAnyDue(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	ctx := context.Background()
	anyDue := func(what string, want bool) {
		t.Helper()
		if due := b.anyDue(t, b.db); due != want {
			t.Fatalf("%s: any due = %t, want %t", what, due, want)
		}
	}
	anyDue("an empty outbox", false)
	a := b.write(t, "a", 1)
	anyDue("a first attempt", true)
	c := b.claim(t, "r1", 1)
	anyDue("a row held under a live lease", true)
	if _, err := mysqlclaim.Mark(ctx, b.db, b.names, "r1", c.Version, a); err != nil {
		t.Fatal(err)
	}
	anyDue("a published row", false)

	a = b.write(t, "a", 1)
	c = b.claim(t, "r1", 1)
	fail := func(permanent bool) {
		t.Helper()
		if _, err := mysqlclaim.Fail(ctx, b.db, b.names, 2, []mysqlclaim.Failure{
			{ID: a[0], Owner: "r1", Version: c.Version, Err: "broker down", Permanent: permanent, Delay: time.Hour}}); err != nil {
			t.Fatal(err)
		}
	}
	fail(false)
	anyDue("a row in backoff", false)
	b.exec(t, `UPDATE outbox SET retry_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id = ?`, a[0])
	anyDue("a retry whose backoff is over", true)
	c = b.claim(t, "r1", 1)
	fail(true)
	anyDue("a dead row", false)

	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	e := event("s", 0)
	e.NotBefore = time.Now().Add(time.Hour)
	if err := b.w.Write(ctx, tx, e); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	anyDue("an event scheduled an hour ahead", false)
	b.exec(t, `UPDATE outbox SET retry_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE aggregate_id = 's'`)
	anyDue("a scheduled event whose time has come", true)
}

// The claim cycle sends its statements with their arguments inlined: no
// server-side prepare on the session, and strings that need quoting (an
// owner, an aggregate, an error) come through as they were, compared
// byte for byte.
func TestMySQLClaimCycleInlinesItsArguments(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	const owner, other = `r'1\" é`, `R'1\" é`
	b.register(t, owner, other)
	agg := `a'b\c "é" ?`
	ids := b.write(t, agg, 3)
	lookalike := b.write(t, `A'b\c "é" ?`, 1)
	ctx := context.Background()
	conn, err := b.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	prepares := func() int64 {
		t.Helper()
		var (
			name string
			v    int64
		)
		if err := conn.QueryRowContext(ctx, `SHOW SESSION STATUS LIKE 'Com_stmt_prepare'`).Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := prepares()
	c, err := mysqlclaim.Claim(ctx, conn, b.names, mysqlclaim.Params{Owner: owner, Limit: 10, Lease: time.Minute, LockWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wantClaimed(t, "the claim", c, append(slices.Clone(ids), lookalike...)...)
	for _, r := range c.Rows {
		if want := map[bool]string{true: agg, false: `A'b\c "é" ?`}[r.ID != lookalike[0]]; r.AggregateID != want {
			t.Fatalf("row %d: aggregate %q, want %q", r.ID, r.AggregateID, want)
		}
	}
	if k, err := mysqlclaim.Mark(ctx, conn, b.names, other, c.Version, ids); err != nil || k != 0 {
		t.Fatalf("a mark by an owner that differs in case marked %d, %v", k, err)
	}
	if k, err := mysqlclaim.Mark(ctx, conn, b.names, owner, c.Version, ids[:1]); err != nil || k != 1 {
		t.Fatalf("the mark marked %d, %v", k, err)
	}
	if k, err := mysqlclaim.Release(ctx, conn, b.names, owner, c.Version, lookalike); err != nil || k != 1 {
		t.Fatalf("the release released %d, %v", k, err)
	}
	const why = `it's a \ "failure" ?`
	out, err := mysqlclaim.Fail(ctx, conn, b.names, 5, []mysqlclaim.Failure{{ID: ids[1], Owner: owner, Version: c.Version, Err: why, Delay: time.Hour}})
	if err != nil || len(out) != 1 || out[0].State != "pending" {
		t.Fatalf("Fail = %v, %v", out, err)
	}
	if d := prepares() - before; d != 0 {
		t.Fatalf("the claim cycle prepared %d statements on the server", d)
	}
	var lastErr string
	if err := b.db.QueryRow(`SELECT last_error FROM outbox WHERE id = ?`, ids[1]).Scan(&lastErr); err != nil || lastErr != why {
		t.Fatalf("last_error %q, %v; want %q", lastErr, err, why)
	}
	// The failed row is in backoff and the one behind it still owner's:
	// owner's next claim takes the released row only.
	wantClaimed(t, "after the failure", b.claim(t, owner, 10), lookalike...)
}
