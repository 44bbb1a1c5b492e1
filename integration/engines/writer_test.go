package engines_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql" // the MySQL engine's driver
	"github.com/google/uuid"

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

func event(aggregate string, n int) txoutbox.Event {
	e, _ := txoutbox.NewEvent("orders", "order", aggregate, "order.placed", map[string]int{"n": n})
	return e
}

// writeRolledBack writes events with w in a transaction on db that it
// rolls back, and returns Write's error.
func writeRolledBack(t *testing.T, db *sql.DB, w *txoutbox.Writer, events ...txoutbox.Event) error {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	return w.Write(context.Background(), tx, events...)
}

func TestWriterCommitAndRollback(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		db := testkit.NewOutboxOn(t, e)
		w := db.Writer(t)
		ctx := context.Background()

		tx, err := db.SQL.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		events := []txoutbox.Event{event("1", 1), event("1", 2)}
		events[0].Headers = map[string]string{"tenant": "acme"}
		if err := w.Write(ctx, tx, events...); err != nil {
			t.Fatal(err)
		}
		if events[0].ID == uuid.Nil || events[0].ID.Version() != 7 || events[0].CreatedAt.IsZero() {
			t.Fatalf("Write did not assign a UUIDv7 and time: %+v", events[0])
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}

		tx, err = db.SQL.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(ctx, tx, event("2", 3)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}

		if n := countRows(t, db.SQL, "SELECT count(*) FROM outbox"); n != 2 {
			t.Fatalf("outbox has %d rows, want the 2 committed", n)
		}
		var (
			id, state, headers, topic string
			payload                   []byte
			shard                     int
		)
		query := `SELECT event_id::text, state, headers::text, topic, payload, shard FROM outbox ORDER BY id LIMIT 1`
		if e.Dialect == txoutbox.MySQL {
			query = `SELECT event_id, state, CAST(headers AS CHAR), topic, payload, shard FROM outbox ORDER BY id LIMIT 1`
		}
		if err = db.SQL.QueryRow(query).Scan(&id, &state, &headers, &topic, &payload, &shard); err != nil {
			t.Fatal(err)
		}
		if id != events[0].ID.String() || state != "pending" || strings.ReplaceAll(headers, " ", "") != `{"tenant":"acme"}` || topic != "orders" ||
			string(payload) != `{"n":1}` || shard < 0 || shard > 255 {
			t.Fatalf("row = %s %s %s %s %s %d", id, state, headers, topic, payload, shard)
		}
	})
}

func TestWriterRejectsInvalidEventAndWritesNothing(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		db := testkit.NewOutboxOn(t, e)
		w := db.Writer(t)
		ctx := context.Background()

		tx, err := db.SQL.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		bad := event("1", 2)
		bad.Topic = "no spaces allowed"
		err = w.Write(ctx, tx, event("1", 1), bad)
		if !errors.Is(err, txoutbox.ErrInvalidEvent) || !strings.Contains(err.Error(), "invalid event 1: Topic") {
			t.Fatalf("Write = %v, want ErrInvalidEvent naming event 1's Topic", err)
		}
		// The transaction is still the caller's: usable, and empty of events.
		var n int
		if err := tx.QueryRow("SELECT count(*) FROM outbox").Scan(&n); err != nil || n != 0 {
			t.Fatalf("after a rejected write: count=%d err=%v, want 0 rows and a usable transaction", n, err)
		}
	})
}

func TestWriterMissingTableFails(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		db := testkit.NewDBOn(t, e) // not migrated
		err := writeRolledBack(t, db.SQL, db.Writer(t), event("1", 1))
		if err == nil || !strings.Contains(err.Error(), "insert 1 events into") {
			t.Fatalf("Write without a table = %v, want a wrapped insert error", err)
		}
	})
}

// TestWriterInTheWrongDialectSaysSo: a PostgreSQL Writer (the default) on
// a MySQL transaction fails with an error that says which Dialect to set.
func TestWriterInTheWrongDialectSaysSo(t *testing.T) {
	t.Parallel()
	testkit.MySQLURL(t)
	db := testkit.NewOutboxOn(t, testkit.MySQL)
	w := testkit.NewWriter(t, db.Table()) // PostgreSQL's SQL
	err := writeRolledBack(t, db.SQL, w, event("1", 1))
	if err == nil || !strings.Contains(err.Error(), "set WriterConfig.Dialect to txoutbox.MySQL") {
		t.Fatalf("a PostgreSQL Writer on MySQL: Write = %v, want an error naming the Dialect to set", err)
	}
}

// TestDialectOf tells the drivers apart by their types.
func TestDialectOf(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		db := testkit.NewDBOn(t, e)
		d, err := txoutbox.DialectOf(db.SQL)
		if err != nil || d != e.Dialect {
			t.Fatalf("DialectOf = %v, %v; want %v", d, err, e.Dialect)
		}
		d, err = txoutbox.DetectDialect(context.Background(), db.SQL)
		if err != nil || d != e.Dialect {
			t.Fatalf("DetectDialect = %v, %v; want %v", d, err, e.Dialect)
		}
	})
	if _, err := txoutbox.DialectOf(sql.OpenDB(unknownConnector{})); !errors.Is(err, txoutbox.ErrUnknownDriver) ||
		!strings.Contains(err.Error(), "engines_test.unknownDriver") {
		t.Fatalf("DialectOf(an unknown driver) = %v, want ErrUnknownDriver naming its type", err)
	}
	if _, err := txoutbox.DialectOf((*sql.DB)(nil)); err == nil {
		t.Fatal("DialectOf(nil) succeeded")
	}
}

type unknownDriver struct{}

func (unknownDriver) Open(string) (driver.Conn, error) { return nil, errors.New("not a database") }

type unknownConnector struct{}

func (unknownConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("not a database")
}
func (unknownConnector) Driver() driver.Driver { return unknownDriver{} }
