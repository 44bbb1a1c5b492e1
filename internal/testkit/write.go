package testkit

import (
	"context"
	"database/sql"
	"testing"

	"github.com/txoutbox/txoutbox"
)

// NewWriter returns a Writer on table with the default configuration, the
// one most tests write with; a configuration it refuses fails the test.
func NewWriter(t testing.TB, table txoutbox.Table) *txoutbox.Writer {
	t.Helper()
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// Commit writes events through w in one transaction of db and commits it,
// failing the test on any error. ctx goes to Write, so a span or baggage in
// it reaches the events' headers.
func Commit(t testing.TB, ctx context.Context, db *sql.DB, w *txoutbox.Writer, events ...txoutbox.Event) {
	t.Helper()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // committed below; a no-op then
	if err := w.Write(ctx, tx, events...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}
