package txoutbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

func countRows(t *testing.T, db *sql.DB, query string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// listen is a pgx connection to db listening on its table's channel,
// closed when the test ends.
func listen(t *testing.T, ctx context.Context, db *testkit.DB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{db.Table().Channel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// pgxBegin begins a transaction on a pgx connection of its own to db, for
// txoutbox.Pgx; end rolls back what was not committed and closes the
// connection.
func pgxBegin(t *testing.T, ctx context.Context, db *testkit.DB) (tx pgx.Tx, end func()) {
	t.Helper()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	if tx, err = conn.Begin(ctx); err != nil {
		conn.Close(ctx)
		t.Fatal(err)
	}
	return tx, func() {
		_ = tx.Rollback(ctx)
		conn.Close(ctx)
	}
}

func event(aggregate string, n int) txoutbox.Event {
	e, _ := txoutbox.NewEvent("orders", "order", aggregate, "order.placed", map[string]int{"n": n})
	return e
}

// countingTracer counts the queries a pgx connection sends.
type countingTracer struct{ queries atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}
func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func TestWriterThousandEventsInOneStatement(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	w := testkit.NewWriter(t, db.Table())
	ctx := context.Background()

	cfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	tracer := &countingTracer{}
	cfg.Tracer = tracer
	traced := stdlib.OpenDB(*cfg)
	defer traced.Close()

	events := make([]txoutbox.Event, 1000)
	for i := range events {
		events[i] = event("agg", i)
	}
	tx, err := traced.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := tracer.queries.Load()
	if err := w.Write(ctx, tx, events...); err != nil {
		t.Fatal(err)
	}
	if got := tracer.queries.Load() - before; got != 1 {
		t.Fatalf("writing 1000 events sent %d queries, want 1", got)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, db.SQL, "SELECT count(*) FROM outbox"); n != 1000 {
		t.Fatalf("got %d rows", n)
	}
	// Rows keep the order they were written in.
	if n := countRows(t, db.SQL, `SELECT count(*) FROM (SELECT payload, lag(payload) OVER (ORDER BY id) AS prev FROM outbox) s
		WHERE prev IS NOT NULL AND (convert_from(payload,'UTF8')::jsonb->>'n')::int < (convert_from(prev,'UTF8')::jsonb->>'n')::int`); n != 0 {
		t.Fatalf("%d rows out of write order", n)
	}
}

func TestWriteThroughPgxAndNotify(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	w := testkit.NewWriter(t, db.Table())
	ctx := context.Background()

	listener := listen(t, ctx, db)

	tx, end := pgxBegin(t, ctx, db)
	defer end()
	if err := w.Write(ctx, txoutbox.Pgx(tx), event("9", 1), event("9", 2), event("9", 3)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := listener.WaitForNotification(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Channel != db.Table().Channel() {
		t.Fatalf("notification on %q", n.Channel)
	}
	if got := countRows(t, db.SQL, "SELECT count(*) FROM outbox WHERE aggregate_id = '9'"); got != 3 {
		t.Fatalf("got %d rows", got)
	}
}

func TestWriterDebouncesNotify(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	ctx := context.Background()
	listener := listen(t, ctx, db)
	notifications := func(interval time.Duration, writes int) int {
		w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: db.Table(), NotifyInterval: interval})
		if err != nil {
			t.Fatal(err)
		}
		for i := range writes {
			testkit.Commit(t, ctx, db.SQL, w, event("d", i))
		}
		n := 0
		for {
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err := listener.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return n
			}
			n++
		}
	}
	if n := notifications(time.Hour, 3); n != 1 {
		t.Fatalf("3 writes within NotifyInterval sent %d notifications, want 1", n)
	}
	if n := notifications(-1, 3); n != 3 {
		t.Fatalf("3 writes with NotifyInterval < 0 sent %d notifications, want 3", n)
	}
}

// A Writer with WALMessages refuses to emit when no WAL relay's slot
// streams the table (the events would be decoded by nothing), through
// database/sql and pgx alike, and emits once a slot does: here one named
// in a relay's marker on a publication of the table.
func TestWALMessagesNeedARelaysSlot(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: db.Table(), WALMessages: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	write := func() (sqlErr, pgxErr error) {
		tx, err := db.SQL.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		sqlErr = w.Write(ctx, tx, event("k", 1))
		ptx, end := pgxBegin(t, ctx, db)
		defer end()
		return sqlErr, w.Write(ctx, txoutbox.Pgx(ptx), event("k", 1))
	}
	if sqlErr, pgxErr := write(); !errors.Is(sqlErr, txoutbox.ErrNoWALSlot) || !errors.Is(pgxErr, txoutbox.ErrNoWALSlot) {
		t.Fatalf("without a slot: Write %v, Write through Pgx %v; want ErrNoWALSlot", sqlErr, pgxErr)
	}
	slot, pub := "s_"+db.Schema, "p_"+db.Schema
	for _, q := range []string{
		`CREATE PUBLICATION ` + pub + ` FOR TABLE ` + db.Table().String() + ` WITH (publish = 'insert')`,
		`SELECT pg_create_logical_replication_slot('` + slot + `', 'pgoutput')`,
	} {
		if _, err := db.SQL.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = db.SQL.Exec(`SELECT pg_drop_replication_slot($1)`, slot)
		_, _ = db.SQL.Exec(`DROP PUBLICATION IF EXISTS ` + pub)
	})
	if sqlErr, pgxErr := write(); !errors.Is(sqlErr, txoutbox.ErrNoWALSlot) || !errors.Is(pgxErr, txoutbox.ErrNoWALSlot) {
		t.Fatalf("with a slot no relay marked: Write %v, Write through Pgx %v; want ErrNoWALSlot", sqlErr, pgxErr)
	}
	if _, err := db.SQL.ExecContext(ctx, `COMMENT ON PUBLICATION `+pub+` IS 'txoutbox: slot `+slot+` up to 0/1 publication x'`); err != nil {
		t.Fatal(err)
	}
	if sqlErr, pgxErr := write(); sqlErr != nil || pgxErr != nil {
		t.Fatalf("with the relay's slot: Write %v, Write through Pgx %v", sqlErr, pgxErr)
	}
}

// A NotBefore is written as the row's not_before and, while it is in the
// future by the database clock, as its retry_at and next_attempt_at (the
// claim's backoff, see outboxsql.Claim); a past or zero one leaves the row
// due at once, a first attempt. Both writers do it.
func TestWriterWritesNotBefore(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	w := testkit.NewWriter(t, db.Table())
	ctx := context.Background()
	later := time.Now().Add(24 * time.Hour).Truncate(time.Microsecond)
	scheduled, past, now := event("a", 1), event("b", 2), event("c", 3)
	scheduled.NotBefore, past.NotBefore = later, time.Now().Add(-time.Hour)
	testkit.Commit(t, ctx, db.SQL, w, scheduled, past, now)
	ptx, end := pgxBegin(t, ctx, db)
	defer end()
	pgxScheduled := event("d", 4)
	pgxScheduled.NotBefore = later
	if err := w.Write(ctx, txoutbox.Pgx(ptx), pgxScheduled); err != nil {
		t.Fatal(err)
	}
	if err := ptx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := db.SQL.Query(`SELECT aggregate_id, not_before, retry_at = '-infinity', retry_at = not_before,
        next_attempt_at > now() + interval '23 hours' FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var (
			agg                         string
			nb                          sql.NullTime
			fresh, retryIsNB, nextLater sql.NullBool
		)
		if err := rows.Scan(&agg, &nb, &fresh, &retryIsNB, &nextLater); err != nil {
			t.Fatal(err)
		}
		switch {
		case agg == "a" || agg == "d":
			if !nb.Valid || !nb.Time.Equal(later) || fresh.Bool || !retryIsNB.Bool || !nextLater.Bool {
				t.Errorf("scheduled row %s: not_before %v (want %v), first attempt %v, retry_at = not_before %v, next_attempt_at later %v",
					agg, nb, later, fresh, retryIsNB, nextLater)
			}
		default:
			if nb.Valid || !fresh.Bool || nextLater.Bool {
				t.Errorf("row %s due at once: not_before %v, first attempt %v, next_attempt_at later %v", agg, nb, fresh, nextLater)
			}
		}
		got = append(got, agg)
	}
	if err := rows.Err(); err != nil || strings.Join(got, "") != "abcd" {
		t.Fatalf("rows %v, %v; want a b c d", got, err)
	}
}

// Bad NotBefores are refused before anything is written, with the
// transaction still usable.
func TestWriterRefusesNotBeforeOutOfBounds(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	w := testkit.NewWriter(t, db.Table())
	ctx := context.Background()
	tx, err := db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, nb := range []time.Time{time.Now().Add(txoutbox.MaxNotBeforeDelay + time.Hour), time.Now().Add(-txoutbox.MaxNotBeforeAge - time.Hour)} {
		bad := event("1", 2)
		bad.NotBefore = nb
		err := w.Write(ctx, tx, event("1", 1), bad)
		var verr *txoutbox.ValidationError
		if !errors.Is(err, txoutbox.ErrInvalidEvent) || !errors.As(err, &verr) || verr.Index != 1 || verr.Field != "NotBefore" {
			t.Fatalf("Write with NotBefore %v = %v; want ErrInvalidEvent naming event 1's NotBefore", nb, err)
		}
	}
	var n int
	if err := tx.QueryRow("SELECT count(*) FROM outbox").Scan(&n); err != nil || n != 0 {
		t.Fatalf("after rejected writes: count=%d err=%v, want 0 rows and a usable transaction", n, err)
	}
}

// streamBy makes a logical slot that streams db's outbox through a
// publication of its name, as a WAL relay's does, and drops both when the
// test ends: the name.
func streamBy(t *testing.T, ctx context.Context, db *testkit.DB) string {
	t.Helper()
	slot := "s_" + db.Schema
	for _, q := range []string{
		`CREATE PUBLICATION ` + slot + ` FOR TABLE ` + db.Table().String() + ` WITH (publish = 'insert')`,
		`SELECT pg_create_logical_replication_slot('` + slot + `', 'pgoutput')`,
	} {
		if _, err := db.SQL.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = db.SQL.Exec(`SELECT pg_drop_replication_slot($1)`, slot)
		_, _ = db.SQL.Exec(`DROP PUBLICATION IF EXISTS ` + slot)
	})
	return slot
}

// openFor waits until tx has been open for d by the database's clock: its
// statements' clock is then d past its now().
func openFor(t *testing.T, tx *sql.Tx, d time.Duration) {
	t.Helper()
	testkit.WaitFor(t, d+10*time.Second, "the transaction is open for "+d.String(), func() bool {
		var open bool
		if err := tx.QueryRow(`SELECT clock_timestamp() > now() + make_interval(secs => $1)`, d.Seconds()).Scan(&open); err != nil {
			t.Fatal(err)
		}
		return open
	})
}

// A NotBefore already past is due at once where the WAL relay streams,
// judged by the statement's clock rather than by the start of the
// transaction: in a transaction open for longer than MaxNotBeforeSkew, an
// event whose NotBefore came after the transaction began goes in as due
// (no not_before), and one less than MaxNotBeforeSkew ahead (a writer's
// clock a little ahead of the database's) goes in too; one further ahead
// is refused, saying by how much. A WALMessages writer judges by its own
// clock, with the same slack.
func TestPastNotBeforeIsDueWhereTheWALRelayStreams(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	ctx := context.Background()
	wal, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: db.Table(), WALMessages: true})
	if err != nil {
		t.Fatal(err)
	}
	soon := event("k", 0)
	soon.NotBefore = time.Now().Add(txoutbox.MaxNotBeforeSkew / 2)
	tx, err := db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// No slot yet: past the NotBefore check, nothing decodes the events.
	if err := wal.Write(ctx, tx, soon); !errors.Is(err, txoutbox.ErrNoWALSlot) {
		t.Fatalf("WALMessages Write with NotBefore %s ahead = %v; want it past the NotBefore check, to ErrNoWALSlot",
			txoutbox.MaxNotBeforeSkew/2, err)
	}

	streamBy(t, ctx, db)
	rows := testkit.NewWriter(t, db.Table())
	long, err := db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback()
	if err := rows.Write(ctx, long, event("k", 1)); err != nil {
		t.Fatal(err)
	}
	openFor(t, long, 2*txoutbox.MaxNotBeforeSkew)
	past, soon := event("k", 2), event("k", 3)
	past.NotBefore = time.Now().Add(-100 * time.Millisecond) // after the transaction's now()
	soon.NotBefore = time.Now().Add(txoutbox.MaxNotBeforeSkew / 2)
	if err := rows.Write(ctx, long, past, soon); err != nil {
		t.Fatalf("a past NotBefore and one %s ahead, in a transaction open for %s, on a streamed table: %v",
			txoutbox.MaxNotBeforeSkew/2, 2*txoutbox.MaxNotBeforeSkew, err)
	}
	if err := long.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, db.SQL, "SELECT count(*) FROM outbox WHERE not_before IS NOT NULL"); n != 1 {
		t.Fatalf("%d rows with a not_before, want only the one still ahead when written", n)
	}

	late := event("k", 4)
	late.NotBefore = time.Now().Add(5 * time.Second)
	tx2, err := db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback()
	if err := rows.Write(ctx, tx2, late); !errors.Is(err, txoutbox.ErrNotBeforeStreamed) || !strings.Contains(err.Error(), "ahead of the database's clock") {
		t.Fatalf("a NotBefore 5s ahead on a streamed table = %v; want ErrNotBeforeStreamed saying how far ahead", err)
	}
}

// The WAL relay publishes at commit: a WALMessages writer refuses a
// delayed event before emitting anything, and the database refuses a
// delayed row on a table a WAL relay's slot streams (the trigger of schema
// version 7), for any writer; rows due at once still go in.
func TestNotBeforeRefusedWhereTheWALRelayStreams(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	ctx := context.Background()
	wal, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: db.Table(), WALMessages: true})
	if err != nil {
		t.Fatal(err)
	}
	delayed := event("k", 1)
	delayed.NotBefore = time.Now().Add(time.Hour)
	tx, err := db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := wal.Write(ctx, tx, event("k", 0), delayed); !errors.Is(err, txoutbox.ErrNotBeforeStreamed) || errors.Is(err, txoutbox.ErrNoWALSlot) {
		t.Fatalf("WALMessages Write of a delayed event = %v; want ErrNotBeforeStreamed before anything is emitted", err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT 1").Err(); err != nil {
		t.Fatalf("the transaction is not usable after the refusal: %v", err)
	}

	rows := testkit.NewWriter(t, db.Table())
	write := func(e txoutbox.Event) error {
		tx, err := db.SQL.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := rows.Write(ctx, tx, e); err != nil {
			return err
		}
		return tx.Commit()
	}
	if err := write(delayed); err != nil {
		t.Fatalf("a delayed row with no WAL relay's slot: %v", err)
	}
	slot := streamBy(t, ctx, db)
	delayed.ID = uuid.Nil
	err = write(delayed)
	if !errors.Is(err, txoutbox.ErrNotBeforeStreamed) || !strings.Contains(err.Error(), slot) {
		t.Fatalf("a delayed row on a streamed table = %v; want ErrNotBeforeStreamed naming slot %s", err, slot)
	}
	now := event("k", 2)
	now.NotBefore = time.Now().Add(-time.Minute) // past: at once, no not_before
	if err := write(now); err != nil {
		t.Fatalf("a row due at once on a streamed table: %v", err)
	}
	if n := countRows(t, db.SQL, "SELECT count(*) FROM outbox WHERE not_before IS NOT NULL"); n != 1 {
		t.Fatalf("%d delayed rows, want the one written before the slot", n)
	}
}
