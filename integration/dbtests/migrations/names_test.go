package migrations_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// Any schema name PostgreSQL allows is migrated, written to, partitioned
// (partitions created ahead, grants and owner carried over) and reverted,
// each name only ever quoted: a hostile one creates its schema and
// nothing else. The names hold a space, quotes, a non-ASCII letter, and
// what a DO block's dollar quotes, a string literal and format() would
// each take for their own syntax.
func TestAnySchemaName(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	ctx := context.Background()
	victim := db.Schema + ".y"
	if _, err := db.SQL.Exec(`CREATE TABLE y (id int)`); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{`"; drop table y; --`, " sp ace", `q"x`, "ü", `'$$%s%I$$'`} {
		schema := db.Schema + suffix
		t.Run(suffix, func(t *testing.T) {
			t.Cleanup(func() { db.SQL.Exec(`DROP SCHEMA IF EXISTS ` + ident.Quote(schema) + ` CASCADE`) }) //nolint:errcheck // best effort
			table := txoutbox.Table{Schema: schema}
			m, err := migrations.New(db.SQL, migrations.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Up(ctx); err != nil {
				t.Fatal(err)
			}
			var exists bool
			if err := db.SQL.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, victim).Scan(&exists); err != nil || !exists {
				t.Fatalf("table %s gone after migrating schema %q: %v", victim, schema, err)
			}
			w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			ev, err := txoutbox.NewEvent("t", "a", "1", "x", 1)
			if err != nil {
				t.Fatal(err)
			}
			testkit.Commit(t, ctx, db.SQL, w, ev)
			if _, err := db.SQL.Exec(`GRANT SELECT ON ` + table.String() + ` TO PUBLIC`); err != nil {
				t.Fatal(err)
			}
			if err := m.Partition(ctx, 100); err != nil {
				t.Fatal(err)
			}
			if _, err := db.SQL.Exec(`SELECT setval(pg_get_serial_sequence($1, 'id'), 350)`, table.String()); err != nil {
				t.Fatal(err)
			}
			ev2, err := txoutbox.NewEvent("t", "a", "2", "x", 2)
			if err != nil {
				t.Fatal(err)
			}
			testkit.Commit(t, ctx, db.SQL, w, ev2)
			if err := m.Partition(ctx, 100); err != nil { // creates partitions ahead
				t.Fatal(err)
			}
			parts := texts(t, db, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
				WHERE i.inhparent = $1::regclass ORDER BY c.relname`, table.String())
			if len(parts) < 5 || !slices.Contains(parts, "outbox_p0") || !slices.Contains(parts, "outbox_default") {
				t.Fatalf("partitions %q; want the first, the default and those ahead", parts)
			}
			var public bool
			if err := db.SQL.QueryRow(`SELECT has_table_privilege('public', $1, 'SELECT')`, table.String()).Scan(&public); err != nil || !public {
				t.Fatalf("PUBLIC's SELECT on the parent = %v, %v; want it kept", public, err)
			}
			var rows int
			if err := db.SQL.QueryRow(`SELECT count(*) FROM ` + table.String()).Scan(&rows); err != nil || rows != 2 {
				t.Fatalf("rows = %d, %v; want 2", rows, err)
			}
			for v := 12; v > 0; v-- {
				down(t, m, v)
			}
		})
	}
}

// A schema named $user cannot be migrated into: a search_path takes the
// name for the current role's schema, and the migrator says so.
func TestSchemaNamedUserRefused(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	_, err := migrations.New(db.SQL, migrations.Config{Table: txoutbox.Table{Schema: "$user"}})
	if !errors.Is(err, txoutbox.ErrInvalidTable) || !strings.Contains(err.Error(), "search_path") {
		t.Fatalf("New with schema $user = %v; want ErrInvalidTable naming the search_path", err)
	}
}
