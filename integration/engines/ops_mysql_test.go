package engines_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox/internal/mysqlclaim"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// The operators' statements on MySQL (internal/outboxsql/mysql_ops.go), on
// the MariaDB of .ci/services: each test runs them as package outboxadmin
// is to (opsRetry, opsReplay), and checks what they do to the rows, the
// claim floor and the claims (internal/mysqlclaim).

// opsRow is what an operator sees of a row (the columns of the MySQL ops
// statements, in outboxadmin's order).
type opsRow struct {
	ID                                             int64
	EventID, Topic, AggregateType, Aggregate, Type string
	ContentType                                    string
	PayloadBytes                                   int
	Headers                                        string
	CreatedAt                                      outboxsql.MySQLTime
	State                                          string
	Attempts                                       int
	NextAttempt                                    outboxsql.MySQLTime
	LastError                                      string
	PublishedAt                                    outboxsql.MySQLTime
	LeaseOwner                                     string
	Payload                                        []byte // MySQLOpsRow only
}

func scanOpsRow(s interface{ Scan(...any) error }, payload bool) (opsRow, error) {
	var (
		r   opsRow
		agg []byte
	)
	dest := []any{&r.ID, &r.EventID, &r.Topic, &r.AggregateType, &agg, &r.Type, &r.ContentType,
		&r.PayloadBytes, &r.Headers, &r.CreatedAt, &r.State, &r.Attempts, &r.NextAttempt, &r.LastError,
		&r.PublishedAt, &r.LeaseOwner}
	if payload {
		dest = append(dest, &r.Payload)
	}
	if err := s.Scan(dest...); err != nil {
		return opsRow{}, err
	}
	r.Aggregate = string(agg)
	return r, nil
}

type opsQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func queryOpsRows(ctx context.Context, q opsQuerier, query string, args ...any) ([]opsRow, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []opsRow
	for rows.Next() {
		r, err := scanOpsRow(rows, false)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func rowIDs(rows []opsRow) []int64 {
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids
}

// spec is a row inserted for the operators' tests.
type spec struct {
	topic, agg, typ string
	created         time.Time
	state           string // pending (default), dead or published
}

// insert writes a row as the writer does (MySQLInsert), then puts it in
// its state as a relay would have: dead after three failures (its backoff
// kept in retry_at), or published.
func (b *claimBundle) insert(t *testing.T, s spec) int64 {
	t.Helper()
	if s.topic == "" {
		s.topic = "orders"
	}
	if s.typ == "" {
		s.typ = "order.placed"
	}
	if s.created.IsZero() {
		s.created = time.Now()
	}
	row := outboxsql.MySQLInsertRow{EventID: uuid.NewString(), Topic: s.topic, AggregateType: "order", AggregateID: s.agg,
		EventType: s.typ, ContentType: "application/json", Payload: []byte(`{"n":1}`), Headers: `{"k":"v"}`, CreatedAt: s.created}
	res, err := b.db.Exec(outboxsql.MySQLInsert(b.names, 1), row.AppendArgs(nil)...)
	if err != nil {
		t.Fatal(err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		t.Fatal(err)
	}
	switch s.state {
	case "dead":
		b.exec(t, `UPDATE outbox SET state = 'dead', attempts = 3, last_error = 'boom', retry_at = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE WHERE id = ?`, id)
	case "published":
		b.exec(t, `UPDATE outbox SET state = 'published', published_at = UTC_TIMESTAMP(6) WHERE id = ?`, id)
	}
	return id
}

// opTx begins an operator transaction as outboxadmin is to: READ
// COMMITTED, with MySQLOpsTimeouts.
func (b *claimBundle) opTx(t *testing.T, ctx context.Context) *sql.Tx {
	t.Helper()
	tx, err := b.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, outboxsql.MySQLOpsTimeouts, outboxsql.MySQLOpsTimeoutsArgs{Timeout: 10 * time.Second}.Args()...); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	return tx
}

// retried is one row a retry returned to pending, and the later rows of
// its aggregate in flight (Retried.Overtaken).
type retried struct {
	ID        int64
	Overtaken []int64
}

// opsRetry is outboxadmin's Retry on MySQL: lock the dead rows f selects,
// take the claim gate, lock the aggregates' unpublished rows (those
// claimed above a retried row overtake it), return the rows to pending and
// lower the floor, in one transaction. gated, if not nil, is closed once
// the gate is held, and the retry then waits for release to commit.
func (b *claimBundle) opsRetry(t *testing.T, ctx context.Context, f outboxsql.DeadArgs, gated chan<- struct{}, release <-chan struct{}) ([]retried, error) {
	t.Helper()
	tx := b.opTx(t, ctx)
	defer tx.Rollback()
	dead, err := queryOpsRows(ctx, tx, outboxsql.MySQLOpsDeadLock(b.names, f.Filters(), len(f.IDs)), outboxsql.MySQLDeadArgs{DeadArgs: f}.Args()...)
	if err != nil {
		return nil, fmt.Errorf("lock dead rows: %w", err)
	}
	if len(dead) == 0 {
		return nil, nil
	}
	var floor int64
	if err := tx.QueryRowContext(ctx, b.names.Render(outboxsql.MySQLOpsClaimGate)).Scan(&floor); err != nil {
		return nil, fmt.Errorf("take the claim gate: %w", err)
	}
	if gated != nil {
		close(gated)
		<-release
	}
	var aggs []string
	for _, r := range dead {
		if !slices.Contains(aggs, r.Aggregate) {
			aggs = append(aggs, r.Aggregate)
		}
	}
	rows, err := tx.QueryContext(ctx, outboxsql.MySQLOpsLockUnpublished(b.names, len(aggs)), outboxsql.MySQLIDsArgs[string]{IDs: aggs}.Args()...)
	if err != nil {
		return nil, fmt.Errorf("lock unpublished rows: %w", err)
	}
	claimed := map[string][]int64{}
	for rows.Next() {
		var (
			id    int64
			agg   []byte
			state string
		)
		if err := rows.Scan(&id, &agg, &state); err != nil {
			rows.Close()
			return nil, err
		}
		if state == "claimed" {
			claimed[string(agg)] = append(claimed[string(agg)], id)
		}
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	out := make([]retried, len(dead))
	for i, r := range dead {
		out[i].ID = r.ID
		for _, c := range claimed[r.Aggregate] {
			if c > r.ID {
				out[i].Overtaken = append(out[i].Overtaken, c)
			}
		}
	}
	ids := rowIDs(dead)
	res, err := tx.ExecContext(ctx, outboxsql.MySQLOpsRetry(b.names, len(ids)), outboxsql.MySQLIDsArgs[int64]{IDs: ids}.Args()...)
	if err != nil {
		return nil, fmt.Errorf("retry: %w", err)
	}
	if k, err := res.RowsAffected(); err != nil || k != int64(len(ids)) {
		return nil, fmt.Errorf("retry: %d of %d rows changed (%v)", k, len(ids), err)
	}
	if _, err := tx.ExecContext(ctx, b.names.Render(outboxsql.MySQLOpsLowerFloor), outboxsql.MySQLLowerFloorArgs{IDs: ids}.Args()...); err != nil {
		return nil, fmt.Errorf("lower the floor: %w", err)
	}
	return out, tx.Commit()
}

// opsReplay is outboxadmin's Replay of ids on MySQL: take the claim gate,
// lock the rows still published (what is replayed), reset them and lower
// the floor; it returns the ids replayed.
func (b *claimBundle) opsReplay(t *testing.T, ctx context.Context, ids []int64) []int64 {
	t.Helper()
	tx := b.opTx(t, ctx)
	defer tx.Rollback()
	var floor int64
	if err := tx.QueryRowContext(ctx, b.names.Render(outboxsql.MySQLOpsClaimGate)).Scan(&floor); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.QueryContext(ctx, outboxsql.MySQLOpsReplayLock(b.names, len(ids)), outboxsql.MySQLIDsArgs[int64]{IDs: ids}.Args()...)
	if err != nil {
		t.Fatal(err)
	}
	var locked []int64
	for rows.Next() {
		var (
			id    int64
			topic string
		)
		if err := rows.Scan(&id, &topic); err != nil {
			t.Fatal(err)
		}
		locked = append(locked, id)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if len(locked) == 0 {
		return nil
	}
	res, err := tx.ExecContext(ctx, outboxsql.MySQLOpsReplay(b.names, len(locked)), outboxsql.MySQLIDsArgs[int64]{IDs: locked}.Args()...)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := res.RowsAffected(); err != nil || k != int64(len(locked)) {
		t.Fatalf("replay changed %d of the %d rows it locked (%v)", k, len(locked), err)
	}
	if _, err := tx.ExecContext(ctx, b.names.Render(outboxsql.MySQLOpsLowerFloor), outboxsql.MySQLLowerFloorArgs{IDs: locked}.Args()...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return locked
}

func (b *claimBundle) row(t *testing.T, id int64) opsRow {
	t.Helper()
	r, err := scanOpsRow(b.db.QueryRow(b.names.Render(outboxsql.MySQLOpsRow), outboxsql.MySQLOpsRowArgs{ID: id}.Args()...), true)
	if err != nil {
		t.Fatalf("read row %d: %v", id, err)
	}
	return r
}

func (b *claimBundle) floor(t *testing.T) (floor, gen int64) {
	t.Helper()
	if err := b.db.QueryRow(`SELECT floor, gen FROM outbox_claim_floor`).Scan(&floor, &gen); err != nil {
		t.Fatal(err)
	}
	return floor, gen
}

func (b *claimBundle) deadList(t *testing.T, f outboxsql.DeadArgs, after int64, limit int) []int64 {
	t.Helper()
	rows, err := queryOpsRows(context.Background(), b.db, outboxsql.MySQLOpsDeadList(b.names, f.Filters(), len(f.IDs)),
		outboxsql.MySQLDeadListArgs{DeadArgs: f, After: after, Limit: limit}.Args()...)
	if err != nil {
		t.Fatalf("dead list %+v: %v", f, err)
	}
	for _, r := range rows {
		if r.State != "dead" {
			t.Fatalf("dead list %+v: row %d is %s", f, r.ID, r.State)
		}
	}
	return rowIDs(rows)
}

// The dead list: each filter, alone and together, selects the dead rows
// that match and no other row, in id order, and pages by id; the count
// counts them up to its cap.
func TestMySQLOpsDeadListFilters(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type row struct {
		id int64
		s  spec
	}
	var all []row
	for i := range 24 {
		s := spec{
			topic:   []string{"orders", "payments"}[i%2],
			agg:     []string{"a", "b", "c"}[i%3],
			typ:     []string{"order.placed", "order.paid", "order.sent", "order.lost"}[i%4],
			created: t0.Add(time.Duration(i) * time.Hour),
			state:   []string{"dead", "dead", "published", "dead", "pending"}[i%5],
		}
		all = append(all, row{b.insert(t, s), s})
	}
	want := func(f outboxsql.DeadArgs) []int64 {
		var ids []int64
		for _, r := range all {
			s := r.s
			if s.state != "dead" || f.IDs != nil && !slices.Contains(f.IDs, r.id) || f.Topic != "" && s.topic != f.Topic ||
				f.Aggregate != "" && s.agg != f.Aggregate || f.EventType != "" && s.typ != f.EventType ||
				!f.Since.IsZero() && s.created.Before(f.Since) || !f.Until.IsZero() && !s.created.Before(f.Until) {
				continue
			}
			ids = append(ids, r.id)
		}
		return ids
	}
	some := []int64{all[0].id, all[2].id, all[3].id, all[7].id, all[10].id, all[11].id}
	for _, f := range []outboxsql.DeadArgs{
		{},
		{IDs: some},
		{IDs: []int64{}},
		{Topic: "payments"},
		{Aggregate: "b"},
		{EventType: "order.paid"},
		{Since: t0.Add(5 * time.Hour)},
		{Until: t0.Add(9 * time.Hour)},
		{Since: t0.Add(5 * time.Hour), Until: t0.Add(15 * time.Hour)},
		{Topic: "orders", Aggregate: "a"},
		{IDs: some, Topic: "orders"},
		{Aggregate: "c", EventType: "order.lost", Since: t0.Add(2 * time.Hour)},
		{Topic: "payments", EventType: "order.paid", Until: t0.Add(20 * time.Hour)},
		{Aggregate: "nobody"},
	} {
		exp := want(f)
		if got := b.deadList(t, f, 0, 100); !slices.Equal(got, exp) {
			t.Errorf("dead list %+v: %v, want %v", f, got, exp)
		}
		// Paging: pages of 2, each after the last id of the one before.
		var paged []int64
		for after := int64(0); len(paged) <= len(exp); {
			page := b.deadList(t, f, after, 2)
			paged = append(paged, page...)
			if len(page) < 2 {
				break
			}
			after = page[len(page)-1]
		}
		if !slices.Equal(paged, exp) {
			t.Errorf("dead list %+v in pages of 2: %v, want %v", f, paged, exp)
		}
		for _, capAt := range []int{1, 100} {
			var n int
			if err := b.db.QueryRow(outboxsql.MySQLOpsDeadCount(b.names, f.Filters(), len(f.IDs)),
				outboxsql.MySQLDeadCountArgs{DeadArgs: f, Cap: capAt}.Args()...).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != min(len(exp), capAt) {
				t.Errorf("dead count %+v, cap %d: %d, want %d", f, capAt, n, min(len(exp), capAt))
			}
		}
	}
}

// Dead show reads a row in any state with its payload and what an
// operator sees of it.
func TestMySQLOpsShow(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	created := time.Date(2026, 2, 3, 4, 5, 6, 789000, time.UTC)
	id := b.insert(t, spec{agg: "a", created: created, state: "dead"})
	r := b.row(t, id)
	if r.State != "dead" || r.Attempts != 3 || r.LastError != "boom" || string(r.Payload) != `{"n":1}` || r.PayloadBytes != 7 ||
		r.Aggregate != "a" || r.Topic != "orders" || r.Headers != `{"k": "v"}` && r.Headers != `{"k":"v"}` ||
		!r.CreatedAt.Time.Equal(created) || r.PublishedAt.Valid || r.LeaseOwner != "" {
		t.Fatalf("dead row %d: %+v", id, r)
	}
	if _, err := uuid.Parse(r.EventID); err != nil {
		t.Fatalf("event id %q: %v", r.EventID, err)
	}
	// A dead row's next attempt is the end of the backoff it died in.
	if d := time.Until(r.NextAttempt.Time); d < 50*time.Second || d > 70*time.Second {
		t.Fatalf("dead row's next attempt in %s, want its backoff's end in about a minute", d)
	}
	b.register(t, "r1")
	p := b.insert(t, spec{agg: "p"})
	c := b.claim(t, "r1", 10)
	if got := b.row(t, p); got.State != "claimed" || got.LeaseOwner != "r1" || !got.NextAttempt.Time.Equal(c.Version) {
		t.Fatalf("claimed row: state %s, owner %q, next attempt %v; want claimed by r1 until %v", got.State, got.LeaseOwner, got.NextAttempt.Time, c.Version)
	}
	if err := b.db.QueryRow(b.names.Render(outboxsql.MySQLOpsRow), outboxsql.MySQLOpsRowArgs{ID: id + 1000}.Args()...).Scan(); !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("a row that does not exist: %v, want sql.ErrNoRows", err)
	}
}

// Retry of one row, of a selection and of all: the rows are pending
// again as first attempts with their attempts reset and their lease
// cleared, last_error kept, no other row changes, and the floor goes
// below the lowest of them with its generation bumped.
func TestMySQLOpsRetry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		filter func(dead []int64) outboxsql.DeadArgs
		want   func(dead []int64) []int64
	}{
		{"one", func(d []int64) outboxsql.DeadArgs { return outboxsql.DeadArgs{IDs: d[2:3]} }, func(d []int64) []int64 { return d[2:3] }},
		{"selection", func(d []int64) outboxsql.DeadArgs { return outboxsql.DeadArgs{Topic: "payments"} }, func(d []int64) []int64 { return []int64{d[1], d[3]} }},
		{"all", func(d []int64) outboxsql.DeadArgs { return outboxsql.DeadArgs{} }, func(d []int64) []int64 { return d }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupMySQLClaim(t)
			var dead []int64
			for i := range 4 {
				dead = append(dead, b.insert(t, spec{agg: fmt.Sprint("g", i), topic: []string{"orders", "payments"}[i%2], state: "dead"}))
			}
			published := b.insert(t, spec{agg: "g0", state: "published"})
			pending := b.insert(t, spec{agg: "g0"})
			// A lease left on the dead rows (a claim's, as Fail would
			// clear it): the retry clears it.
			b.exec(t, `UPDATE outbox SET lease_owner = ?, lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE state = 'dead'`, outboxsql.MySQLLeaseKey("r0"))
			// The floor above every row, as a claim floor that passed them.
			b.exec(t, `UPDATE outbox_claim_floor SET floor = ?`, pending+1)
			_, gen := b.floor(t)

			want := tc.want(dead)
			got, err := b.opsRetry(t, context.Background(), tc.filter(dead), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var gotIDs []int64
			for _, r := range got {
				gotIDs = append(gotIDs, r.ID)
			}
			if !slices.Equal(gotIDs, want) {
				t.Fatalf("retried %v, want %v", gotIDs, want)
			}
			for _, id := range dead {
				r := b.row(t, id)
				if !slices.Contains(want, id) {
					if r.State != "dead" || r.Attempts != 3 {
						t.Fatalf("row %d, not selected, is %s with %d attempts", id, r.State, r.Attempts)
					}
					continue
				}
				if r.State != "pending" || r.Attempts != 0 || r.LeaseOwner != "" || r.LastError != "boom" {
					t.Fatalf("retried row %d: state %s, attempts %d, lease %q, last error %q", id, r.State, r.Attempts, r.LeaseOwner, r.LastError)
				}
				var lane sql.NullInt64
				var held bool
				if err := b.db.QueryRow(`SELECT lane, lease_owner <> `+outboxsql.MySQLNoLeaseOwner+` OR lease_expires_at <> '`+outboxsql.MySQLNeverRetried+`'
FROM outbox WHERE id = ?`, id).Scan(&lane, &held); err != nil {
					t.Fatal(err)
				}
				if lane.Int64 != 1 || held {
					t.Fatalf("retried row %d: lane %v, a lease %t; want a first attempt with no lease", id, lane, held)
				}
			}
			if r := b.row(t, published); r.State != "published" {
				t.Fatalf("the published row is %s", r.State)
			}
			floor, gen2 := b.floor(t)
			if floor != slices.Min(want) || gen2 != gen+1 {
				t.Fatalf("floor %d gen %d after the retry, want %d and %d", floor, gen2, slices.Min(want), gen+1)
			}
		})
	}
}

// A retried dead row goes out before every later row of its aggregate not
// yet claimed, and a later row claimed before the retry overtakes it
// (Overtaken).
func TestMySQLOpsRetriedRowGoesFirst(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1", "r2")
	ctx := context.Background()
	a0 := b.insert(t, spec{agg: "a", state: "dead"})
	a1 := b.insert(t, spec{agg: "a"})
	c0 := b.insert(t, spec{agg: "c", state: "dead"})
	c1 := b.insert(t, spec{agg: "c"})
	c2 := b.insert(t, spec{agg: "c"})
	// r1 has claimed a's later row, which is in flight.
	wantClaimed(t, "r1 before the retry", b.claim(t, "r1", 1), a1)
	// The floor past every row, as a claim floor that passed them.
	b.exec(t, `UPDATE outbox_claim_floor SET floor = ?`, c2+1)

	got, err := b.opsRetry(t, ctx, outboxsql.DeadArgs{IDs: []int64{a0, c0}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != a0 || !slices.Equal(got[0].Overtaken, []int64{a1}) || got[1].ID != c0 || got[1].Overtaken != nil {
		t.Fatalf("retried %+v, want a0 overtaken by a1, c0 by nothing", got)
	}
	// One row at a time: each claim takes the first row due.
	wantClaimed(t, "the first claim after the retry", b.claim(t, "r2", 1), a0)
	// a's next row is r1's; c's rows from the retried one on.
	wantClaimed(t, "the second", b.claim(t, "r2", 10), c0, c1, c2)
}

// gateWaiters counts the sessions of this database waiting on, or
// running, a statement on the claim floor with the lock clause given.
func (b *claimBundle) gateWaiters(t *testing.T, clause string) int {
	t.Helper()
	var n int
	if err := b.db.QueryRow(`SELECT count(*) FROM information_schema.processlist
		WHERE db = DATABASE() AND id <> CONNECTION_ID() AND info LIKE CONCAT('%claim_floor%', ?, '%')`, clause).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A retry waits for a claim holding the gate shared, and does not run
// beside it; a claim waits for a retry holding the gate, and then sees
// the retried row.
func TestMySQLOpsRetryAndClaimWaitForEachOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("retry waits for a claim", func(t *testing.T) {
		t.Parallel()
		b := setupMySQLClaim(t)
		a0 := b.insert(t, spec{agg: "a", state: "dead"})
		// A claim between its gate and its commit (MySQLClaimGate).
		claim, err := b.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		defer claim.Rollback()
		var floor int64
		var now outboxsql.MySQLTime
		if err := claim.QueryRow(b.names.Render(outboxsql.MySQLClaimGate)).Scan(&floor, &now); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := b.opsRetry(t, ctx, outboxsql.DeadArgs{IDs: []int64{a0}}, nil, nil)
			done <- err
		}()
		testkit.WaitFor(t, 10*time.Second, "the retry waiting on the gate", func() bool {
			select {
			case err := <-done:
				t.Fatalf("the retry ran beside a claim holding the gate: %v", err)
			default:
			}
			return b.gateWaiters(t, "FOR UPDATE") > 0
		})
		// Still dead while the claim runs: the claim sees no retry.
		var state string
		if err := claim.QueryRow(`SELECT state FROM outbox WHERE id = ?`, a0).Scan(&state); err != nil || state != "dead" {
			t.Fatalf("the row is %q (%v) while the claim holds the gate, want dead", state, err)
		}
		if err := claim.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if r := b.row(t, a0); r.State != "pending" {
			t.Fatalf("after the claim: %s", r.State)
		}
	})
	t.Run("claim waits for a retry", func(t *testing.T) {
		t.Parallel()
		b := setupMySQLClaim(t)
		b.register(t, "r1")
		a0 := b.insert(t, spec{agg: "a", state: "dead"})
		a1 := b.insert(t, spec{agg: "a"})
		gated, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := b.opsRetry(t, ctx, outboxsql.DeadArgs{IDs: []int64{a0}}, gated, release)
			done <- err
		}()
		<-gated
		// LockWait bounds the claim's wait for the retry's gate.
		_, err := mysqlclaim.Claim(ctx, b.db, b.names, mysqlclaim.Params{Owner: "r1", Limit: 10, Lease: time.Minute, LockWait: time.Second})
		if err == nil || !strings.Contains(err.Error(), "1205") {
			t.Fatalf("a claim while a retry holds the gate = %v, want a lock wait timeout (1205)", err)
		}
		claimed := make(chan mysqlclaim.Claimed, 1)
		claimErr := make(chan error, 1)
		go func() {
			c, err := mysqlclaim.Claim(ctx, b.db, b.names, mysqlclaim.Params{Owner: "r1", Limit: 10, Lease: time.Minute, LockWait: 30 * time.Second})
			claimed <- c
			claimErr <- err
		}()
		testkit.WaitFor(t, 10*time.Second, "the claim waiting on the gate", func() bool {
			select {
			case c := <-claimed:
				t.Fatalf("the claim ran beside a retry holding the gate: %v, %v", claimedIDs(c), <-claimErr)
			default:
			}
			return b.gateWaiters(t, "LOCK IN SHARE MODE") > 0
		})
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		c := <-claimed
		if err := <-claimErr; err != nil {
			t.Fatal(err)
		}
		wantClaimed(t, "the claim after the retry", c, a0, a1)
	})
}

// Drop deletes the dead rows selected and no other: a published or
// pending row among the ids stays.
func TestMySQLOpsDrop(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	ctx := context.Background()
	d0 := b.insert(t, spec{agg: "a", state: "dead"})
	p := b.insert(t, spec{agg: "a", state: "published"})
	q := b.insert(t, spec{agg: "a"})
	d1 := b.insert(t, spec{agg: "b", state: "dead"})
	d2 := b.insert(t, spec{agg: "c", state: "dead"})

	tx := b.opTx(t, ctx)
	defer tx.Rollback()
	f := outboxsql.DeadArgs{IDs: []int64{d0, p, q, d1}}
	locked, err := queryOpsRows(ctx, tx, outboxsql.MySQLOpsDeadLock(b.names, f.Filters(), len(f.IDs)), outboxsql.MySQLDeadArgs{DeadArgs: f}.Args()...)
	if err != nil {
		t.Fatal(err)
	}
	if got := rowIDs(locked); !slices.Equal(got, []int64{d0, d1}) {
		t.Fatalf("locked %v, want the dead ones %v", got, []int64{d0, d1})
	}
	all := []int64{d0, p, q, d1}
	res, err := tx.Exec(outboxsql.MySQLOpsDrop(b.names, len(all)), outboxsql.MySQLIDsArgs[int64]{IDs: all}.Args()...)
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := res.RowsAffected(); k != 2 {
		t.Fatalf("dropped %d rows, want 2", k)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	left := mustColumn[int64](t, b.db, `SELECT id FROM outbox ORDER BY id`)
	if !slices.Equal(left, []int64{p, q, d2}) {
		t.Fatalf("rows left %v, want %v", left, []int64{p, q, d2})
	}
}

// Replay selects the rows published since a time (of a topic, of an
// aggregate), in id order (outboxadmin groups them); by ids it
// returns those still published to pending, as first attempts with no
// lease, lowers the floor, and the claim takes them in order.
func TestMySQLOpsReplay(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	ctx := context.Background()
	old := b.insert(t, spec{agg: "a", state: "published"})
	b.exec(t, `UPDATE outbox SET published_at = UTC_TIMESTAMP(6) - INTERVAL 1 DAY WHERE id = ?`, old)
	a1 := b.insert(t, spec{agg: "a", state: "published"})
	c1 := b.insert(t, spec{agg: "c", topic: "payments", state: "published"})
	a2 := b.insert(t, spec{agg: "a", state: "published"})
	dead := b.insert(t, spec{agg: "c", state: "dead"})
	c2 := b.insert(t, spec{agg: "c", topic: "payments", state: "published"})
	since := time.Now().Add(-time.Hour)

	type sel struct {
		agg string
		id  int64
	}
	selectReplay := func(a outboxsql.MySQLReplaySelectArgs) []sel {
		rows, err := b.db.Query(b.names.Render(outboxsql.MySQLOpsReplaySelect), a.Args()...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []sel
		for rows.Next() {
			var (
				agg   []byte
				id    int64
				topic string
			)
			if err := rows.Scan(&agg, &id, &topic); err != nil {
				t.Fatal(err)
			}
			out = append(out, sel{string(agg), id})
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tc := range []struct {
		args outboxsql.MySQLReplaySelectArgs
		want []sel
	}{
		{outboxsql.MySQLReplaySelectArgs{Since: since}, []sel{{"a", a1}, {"c", c1}, {"a", a2}, {"c", c2}}},
		{outboxsql.MySQLReplaySelectArgs{Since: since.Add(-48 * time.Hour)}, []sel{{"a", old}, {"a", a1}, {"c", c1}, {"a", a2}, {"c", c2}}},
		{outboxsql.MySQLReplaySelectArgs{Since: since, Topic: "payments"}, []sel{{"c", c1}, {"c", c2}}},
		{outboxsql.MySQLReplaySelectArgs{Since: since, Aggregate: "a"}, []sel{{"a", a1}, {"a", a2}}},
		{outboxsql.MySQLReplaySelectArgs{Since: since, Topic: "orders", Aggregate: "c"}, nil},
		{outboxsql.MySQLReplaySelectArgs{Since: time.Now().Add(time.Hour)}, nil},
	} {
		if got := selectReplay(tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("replay selection %+v: %v, want %v", tc.args, got, tc.want)
		}
	}

	b.exec(t, `UPDATE outbox_claim_floor SET floor = ?`, c2+1)
	_, gen := b.floor(t)
	// The dead row is not published: not replayed.
	if got := b.opsReplay(t, ctx, []int64{a1, a2, dead}); !slices.Equal(got, []int64{a1, a2}) {
		t.Fatalf("replayed %v, want %v", got, []int64{a1, a2})
	}
	for _, id := range []int64{a1, a2} {
		r := b.row(t, id)
		if r.State != "pending" || r.Attempts != 0 || r.PublishedAt.Valid || r.LeaseOwner != "" {
			t.Fatalf("replayed row %d: %+v", id, r)
		}
	}
	if r := b.row(t, dead); r.State != "dead" {
		t.Fatalf("the dead row is %s", r.State)
	}
	if floor, gen2 := b.floor(t); floor != a1 || gen2 != gen+1 {
		t.Fatalf("floor %d gen %d after the replay, want %d and %d", floor, gen2, a1, gen+1)
	}
	wantClaimed(t, "after the replay", b.claim(t, "r1", 10), a1, a2)
}

// A mark from a claim before a replay changes nothing after it: the
// replay cleared the lease the mark is fenced by.
func TestMySQLOpsReplayFencesEarlierMarks(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	ctx := context.Background()
	a := b.insert(t, spec{agg: "a"})
	c := b.claim(t, "r1", 1)
	wantClaimed(t, "the claim", c, a)
	if k, err := mysqlclaim.Mark(ctx, b.db, b.names, "r1", c.Version, []int64{a}); err != nil || k != 1 {
		t.Fatalf("Mark = %d, %v", k, err)
	}
	// A published row that kept its lease (published by a tool, or by a
	// relay that does not clear it), so that only the replay can clear it.
	k := b.insert(t, spec{agg: "k"})
	ck := b.claim(t, "r1", 1)
	wantClaimed(t, "the second claim", ck, k)
	b.exec(t, `UPDATE outbox SET state = 'published', published_at = UTC_TIMESTAMP(6) WHERE id = ?`, k)

	if got := b.opsReplay(t, ctx, []int64{a, k}); !slices.Equal(got, []int64{a, k}) {
		t.Fatalf("replayed %v", got)
	}
	for _, late := range []struct {
		id      int64
		version time.Time
	}{{a, c.Version}, {k, ck.Version}} {
		if n, err := mysqlclaim.Mark(ctx, b.db, b.names, "r1", late.version, []int64{late.id}); err != nil || n != 0 {
			t.Fatalf("a mark of row %d from before the replay marked %d, %v", late.id, n, err)
		}
		if r := b.row(t, late.id); r.State != "pending" {
			t.Fatalf("row %d after a late mark: %s, want pending", late.id, r.State)
		}
	}
}

// Look-up finds an event's rows by its event id, and an aggregate's rows,
// in every state and of any age, newest first, up to the limit.
func TestMySQLOpsLookup(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	p := b.insert(t, spec{agg: "a", state: "published"})
	d := b.insert(t, spec{agg: "a", state: "dead"})
	for i := range 50 {
		b.insert(t, spec{agg: fmt.Sprint("other", i), state: "published"})
	}
	q := b.insert(t, spec{agg: "a"})
	r := b.insert(t, spec{agg: "a"})
	b.exec(t, `UPDATE outbox SET attempts = 1, retry_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE id = ?`, r)
	lookup := func(a outboxsql.MySQLLookupArgs) []int64 {
		t.Helper()
		query := outboxsql.MySQLOpsLookupEventID
		if a.Aggregate {
			query = outboxsql.MySQLOpsLookupAggregate
		}
		rows, err := queryOpsRows(context.Background(), b.db, b.names.Render(query), a.Args()...)
		if err != nil {
			t.Fatal(err)
		}
		return rowIDs(rows)
	}
	for _, id := range []int64{p, d, q, r} {
		ev := b.row(t, id).EventID
		if got := lookup(outboxsql.MySQLLookupArgs{Key: ev, Limit: 10}); !slices.Equal(got, []int64{id}) {
			t.Errorf("look-up of event %s (row %d): %v", ev, id, got)
		}
	}
	if got := lookup(outboxsql.MySQLLookupArgs{Key: uuid.NewString(), Limit: 10}); len(got) != 0 {
		t.Errorf("look-up of an unknown event: %v", got)
	}
	if got := lookup(outboxsql.MySQLLookupArgs{Aggregate: true, Key: "a", Limit: 10}); !slices.Equal(got, []int64{r, q, d, p}) {
		t.Errorf("look-up of aggregate a: %v, want %v", got, []int64{r, q, d, p})
	}
	if got := lookup(outboxsql.MySQLLookupArgs{Aggregate: true, Key: "a", Limit: 3}); !slices.Equal(got, []int64{r, q, d}) {
		t.Errorf("look-up of aggregate a, limit 3: %v, want %v", got, []int64{r, q, d})
	}
}

// Status: the counts by state, the lag and the next scheduled row, the
// relays with their heartbeat's age, the shards and their owners, and the
// shards in handover.
func TestMySQLOpsStatus(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1", "r2")
	ctx := context.Background()
	old := time.Now().UTC().Add(-time.Hour).Truncate(time.Microsecond)
	b.insert(t, spec{agg: "a", created: old})
	b.insert(t, spec{agg: "a"})
	b.insert(t, spec{agg: "b", state: "dead"})
	b.insert(t, spec{agg: "b", state: "dead"})
	b.insert(t, spec{agg: "b", state: "published"})
	next := time.Now().UTC().Add(time.Hour).Truncate(time.Microsecond)
	for _, nb := range []time.Time{next.Add(time.Hour), next} {
		row := outboxsql.MySQLInsertRow{EventID: uuid.NewString(), Topic: "orders", AggregateID: "s", EventType: "t",
			Payload: []byte("{}"), Headers: "{}", CreatedAt: time.Now(), NotBefore: nb}
		b.exec(t, outboxsql.MySQLInsert(b.names, 1), row.AppendArgs(nil)...)
	}
	lastID := b.insert(t, spec{agg: "c"})
	// r2 claims a's first row; r1 owns its shard: a handover.
	wantClaimed(t, "r2's claim", b.claim(t, "r2", 1), b.row(t, 1).ID)
	var shardOfA int
	if err := b.db.QueryRow(`SELECT shard FROM outbox WHERE id = 1`).Scan(&shardOfA); err != nil {
		t.Fatal(err)
	}
	b.exec(t, `UPDATE outbox_shards SET owner = 'r1' WHERE shard = ?`, shardOfA)
	b.exec(t, `UPDATE outbox_relays SET heartbeat_at = UTC_TIMESTAMP(6) - INTERVAL 20 SECOND WHERE id = 'r2'`)

	var (
		unpublished, dead, scheduled int64
		oldest, nextDue, now, due    outboxsql.MySQLTime
		maxID                        int64
	)
	read := func(capAt int) {
		t.Helper()
		if err := b.db.QueryRowContext(ctx, b.names.Render(outboxsql.MySQLOpsCounts), outboxsql.MySQLCountArgs{Cap: capAt, Counts: 3}.Args()...).
			Scan(&unpublished, &dead, &scheduled, &oldest, &nextDue, &maxID, &now, &due); err != nil {
			t.Fatal(err)
		}
	}
	read(100)
	if unpublished != 5 || dead != 2 || scheduled != 2 || maxID != lastID {
		t.Fatalf("counts: unpublished %d, dead %d, scheduled %d, last id %d; want 5, 2, 2, %d", unpublished, dead, scheduled, maxID, lastID)
	}
	// a's first row is the oldest, and is held behind no scheduled row.
	if !oldest.Time.Equal(old) || !due.Time.Equal(old) || !nextDue.Time.Equal(next) || now.Time.Sub(time.Now()).Abs() > time.Minute {
		t.Fatalf("oldest due %v, due %v (want %v), next scheduled %v (want %v), now %v", oldest.Time, due.Time, old, nextDue.Time, next, now.Time)
	}
	read(1)
	if unpublished != 1 || dead != 1 || scheduled != 1 {
		t.Fatalf("counts at cap 1: unpublished %d, dead %d, scheduled %d; want each at the cap", unpublished, dead, scheduled)
	}

	rows, err := b.db.QueryContext(ctx, b.names.Render(outboxsql.MySQLOpsRelays))
	if err != nil {
		t.Fatal(err)
	}
	ages := map[string]float64{}
	for rows.Next() {
		var (
			id, host       string
			started, heart outboxsql.MySQLTime
			age            float64
		)
		if err := rows.Scan(&id, &host, &started, &heart, &age); err != nil {
			t.Fatal(err)
		}
		ages[id] = age
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if len(ages) != 2 || ages["r1"] < 0 || ages["r1"] > 10 || ages["r2"] < 20 || ages["r2"] > 30 {
		t.Fatalf("relays' heartbeat ages %v, want r1's about 0 and r2's about 20s", ages)
	}

	rows, err = b.db.QueryContext(ctx, b.names.Render(outboxsql.MySQLOpsShards))
	if err != nil {
		t.Fatal(err)
	}
	owners := map[int]string{}
	for rows.Next() {
		var (
			shard int
			owner string
		)
		if err := rows.Scan(&shard, &owner); err != nil {
			t.Fatal(err)
		}
		owners[shard] = owner
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if len(owners) != 256 || owners[shardOfA] != "r1" || owners[(shardOfA+1)%256] != "" {
		t.Fatalf("%d shards, shard %d owned by %q", len(owners), shardOfA, owners[shardOfA])
	}

	handovers := func() []int {
		rows, err := b.db.QueryContext(ctx, b.names.Render(outboxsql.MySQLOpsHandovers), outboxsql.MySQLHandoversArgs{Window: outboxsql.OpsHandoverWindow}.Args()...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []int
		for rows.Next() {
			var s int
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	if got := handovers(); !slices.Equal(got, []int{shardOfA}) {
		t.Fatalf("handovers %v, want [%d]", got, shardOfA)
	}
	b.exec(t, `UPDATE outbox_shards SET owner = 'r2' WHERE shard = ?`, shardOfA)
	if got := handovers(); len(got) != 0 {
		t.Fatalf("handovers %v once the holder owns the shard, want none", got)
	}
}

// The dead list and the dead count read their page (their cap), not the
// table: their row reads are the same with 1,000,000 published, 50,000
// dead and 50,000 unpublished rows (100,000, 10,000 and 10,000 under
// -short) as with 1,000, 100 and 1,000, for each leading filter, when the
// dead rows are the filter's matches (ids, an aggregate: the rows given,
// the aggregate's rows; no filter, a topic, a type, a creation window:
// the dead rows walked in id order on outbox_prune_idx, where the
// unpublished rows' published_at is MySQLUnpublished too).
func TestMySQLOpsDeadListCostIsItsPage(t *testing.T) {
	t.Parallel()
	type form struct {
		name string
		args func(ids []int64) outboxsql.DeadArgs
	}
	forms := []form{
		{"none", func([]int64) outboxsql.DeadArgs { return outboxsql.DeadArgs{} }},
		{"ids", func(ids []int64) outboxsql.DeadArgs { return outboxsql.DeadArgs{IDs: ids} }},
		{"aggregate", func([]int64) outboxsql.DeadArgs { return outboxsql.DeadArgs{Aggregate: "mine"} }},
		{"topic", func([]int64) outboxsql.DeadArgs { return outboxsql.DeadArgs{Topic: "orders"} }},
		{"type", func([]int64) outboxsql.DeadArgs { return outboxsql.DeadArgs{EventType: "order.placed"} }},
		{"created", func([]int64) outboxsql.DeadArgs {
			return outboxsql.DeadArgs{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour)}
		}},
	}
	const page = 10
	type size struct{ published, dead, pending int }
	cost := func(t *testing.T, sz size) map[string]int64 {
		b := setupMySQLClaim(t)
		b.bulkRows(t, sz.published, "p", "published", "'"+outboxsql.MySQLNeverRetried+"'")
		b.bulkRows(t, sz.dead, "d", "dead", "UTC_TIMESTAMP(6)")
		b.bulkRows(t, sz.pending, "u", "pending", "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR")
		var mine []int64
		for range page {
			mine = append(mine, b.insert(t, spec{agg: "mine", state: "dead"}))
		}
		ctx := context.Background()
		conn, err := b.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		out := map[string]int64{}
		for _, fm := range forms {
			f := fm.args(mine)
			// The first page: "mine"'s rows (ids, aggregate) come after
			// every other dead row.
			after := int64(0)
			before := handlerReads(t, conn)
			rows, err := queryOpsRows(ctx, conn, outboxsql.MySQLOpsDeadList(b.names, f.Filters(), len(f.IDs)),
				outboxsql.MySQLDeadListArgs{DeadArgs: f, After: after, Limit: page}.Args()...)
			if err != nil {
				t.Fatal(err)
			}
			delta := handlerReads(t, conn)
			if len(rows) != page {
				t.Fatalf("%s: a page of %d rows, want %d", fm.name, len(rows), page)
			}
			var total int64
			for k, v := range delta {
				total += v - before[k]
			}
			out[fm.name] = total

			var n int
			total, _ = readsOf(t, conn, func() {
				stmt := outboxsql.MySQLOpsDeadCount(b.names, f.Filters(), len(f.IDs))
				args := outboxsql.MySQLDeadCountArgs{DeadArgs: f, Cap: page}.Args()
				if err := conn.QueryRowContext(ctx, stmt, args...).Scan(&n); err != nil {
					t.Fatal(err)
				}
			})
			if n != page {
				t.Fatalf("%s: counted %d dead rows up to %d, want %d", fm.name, n, page, page)
			}
			out[fm.name+" count"] = total
		}
		return out
	}
	small, large := size{1_000, 100, 1_000}, size{1_000_000, 50_000, 50_000}
	if testing.Short() {
		large = size{100_000, 10_000, 10_000}
	}
	s, l := cost(t, small), cost(t, large)
	t.Logf("row reads of a page of %d: %v at %+v, %v at %+v", page, s, small, l, large)
	for _, fm := range forms {
		for _, what := range []string{fm.name, fm.name + " count"} {
			// A few reads of slack: SHOW STATUS's own, which do not grow.
			if l[what] > s[what]+5 || l[what] > 4*page+20 {
				t.Errorf("%s: the dead list read %d rows and entries at %+v, %d at %+v: it walks them",
					what, l[what], large, s[what], small)
			}
		}
	}
}
