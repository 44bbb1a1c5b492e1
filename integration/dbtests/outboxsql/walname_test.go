package outboxsql_test

import (
	"context"
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// The server computes the default slot name of a table (OpsWALSlots and
// RelayWALSlots find the WAL relay's slot by it) exactly as WALName does
// for the relay, for any schema and table name PostgreSQL takes.
func TestWALNameOfIsWALName(t *testing.T) {
	t.Parallel()
	d := testkit.NewDB(t)
	ctx := context.Background()
	var database string
	if err := d.SQL.QueryRowContext(ctx, `SELECT current_database()`).Scan(&database); err != nil {
		t.Fatal(err)
	}
	suffix := d.Schema[strings.LastIndexByte(d.Schema, '_'):]
	for _, tc := range []struct{ schema, table string }{
		{d.Schema, "outbox"},
		{"Upper" + suffix, "Events"},
		{"with space" + suffix, "out box"},
		{`quo"te` + suffix, `ta"ble`},
		{"schéma日本" + suffix, "événements"},
		{"a-b.c" + suffix, "x$y"},
		{strings.Repeat("s", 63-len(suffix)) + suffix, strings.Repeat("T", 63)},
	} {
		if tc.schema != d.Schema {
			if _, err := d.SQL.ExecContext(ctx, `CREATE SCHEMA `+ident.Quote(tc.schema)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = d.SQL.Exec(`DROP SCHEMA ` + ident.Quote(tc.schema) + ` CASCADE`) })
		}
		table := ident.Qualified(tc.schema, tc.table)
		if _, err := d.SQL.ExecContext(ctx, `CREATE TABLE `+table+` (id int)`); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := d.SQL.QueryRowContext(ctx, outboxsql.WALNameOf, table).Scan(&got); err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		if want := outboxsql.WALName(database, tc.schema, tc.table); got != want {
			t.Errorf("%s: the server's name %q, WALName %q", table, got, want)
		}
	}
}
