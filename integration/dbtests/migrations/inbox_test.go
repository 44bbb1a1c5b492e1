package migrations_test

import (
	"cmp"
	"context"
	"io/fs"
	"slices"
	"testing"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// upInbox applies the inbox set for table, and stops the test unless that
// was its one version and made the inbox table (by default "inbox") and
// its migrations table.
func upInbox(t *testing.T, db *testkit.DB, table txoutbox.Table) *migrations.Migrator {
	t.Helper()
	m, err := migrations.New(db.SQL, migrations.Config{Set: migrations.Inbox, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if applied, err := m.Up(context.Background()); err != nil || !slices.Equal(applied, []int{1}) {
		t.Fatalf("Up = %v, %v; want [1]", applied, err)
	}
	name := cmp.Or(table.Name, "inbox")
	for _, tbl := range []string{name, name + "_schema_migrations"} {
		if !relationExists(t, db, db.Schema, tbl) {
			t.Fatalf("%s missing after Up", tbl)
		}
	}
	return m
}

func TestInboxUpDown(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	m := upInbox(t, db, txoutbox.Table{Schema: db.Schema})
	if relationExists(t, db, db.Schema, "outbox") {
		t.Fatal("the inbox set created the outbox table")
	}
	down(t, m, 1)
	if relationExists(t, db, db.Schema, "inbox") {
		t.Fatal("inbox still there after Down")
	}
}

func TestInboxBesideOutbox(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t) // the outbox set is applied; its versions must not hide the inbox's
	upInbox(t, db, txoutbox.Table{Schema: db.Schema, Name: "billing_inbox"})
	var idx int
	if err := db.SQL.QueryRow(`SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = 'billing_inbox_processed_at_idx'`, db.Schema).Scan(&idx); err != nil || idx != 1 {
		t.Fatalf("pruning index renamed: count=%d err=%v", idx, err)
	}
	// The primary key is (consumer, event_id): one consumer cannot record an
	// event twice, another consumer can record it independently.
	const id = "0190f1e2-7b3c-7def-8a12-3456789abcde"
	for _, consumer := range []string{"a", "b"} {
		if _, err := db.SQL.Exec(`INSERT INTO billing_inbox (consumer, event_id) VALUES ($1, $2)`, consumer, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.SQL.Exec(`INSERT INTO billing_inbox (consumer, event_id) VALUES ('a', $1)`, id); err == nil {
		t.Fatal("a second (consumer, event_id) row was accepted")
	}
}

func TestInboxFilesArePlainSQL(t *testing.T) {
	t.Parallel()
	entries, err := fs.Glob(migrations.Inbox.FS(), "*")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0001_inbox.down.sql", "0001_inbox.up.sql"}
	if !slices.Equal(entries, want) {
		t.Fatalf("files = %v, want %v", entries, want)
	}
}
