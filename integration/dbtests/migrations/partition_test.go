package migrations_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

// texts runs query and returns its one text column.
func texts(t *testing.T, db *testkit.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.SQL.Query(query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// partitionsOf lists the partitions of schema's outbox with their bounds.
func partitionsOf(t *testing.T, db *testkit.DB) []string {
	t.Helper()
	return texts(t, db, `SELECT c.relname || ' ' || pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = to_regclass(quote_ident($1) || '.outbox') ORDER BY c.relname`, db.Schema)
}

func TestPartitionConvertsTheTableAndKeepsItsShape(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	ctx := context.Background()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.SQL.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload)
		SELECT gen_random_uuid(), 't', 'a' || (g % 7), 'e', '\x00' FROM generate_series(1, 2500) g`)
	exec(`UPDATE outbox SET state = 'dead' WHERE id = 3`)
	exec(`GRANT SELECT, INSERT ON outbox TO PUBLIC`)
	shape := func() (cols, indexes, triggers []string) {
		t.Helper()
		q := func(query string) []string { return texts(t, db, query) }
		cols = q(`SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' ' || a.attidentity::text || a.attgenerated::text
			|| ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '') FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
			WHERE a.attrelid = 'outbox'::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attname`)
		indexes = q(`SELECT c.relname || ' ' || regexp_replace(pg_get_indexdef(i.indexrelid), '^.* USING ', '') FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE i.indrelid = 'outbox'::regclass ORDER BY 1`)
		triggers = q(`SELECT tgname FROM pg_trigger WHERE tgrelid = 'outbox'::regclass AND NOT tgisinternal ORDER BY 1`)
		return cols, indexes, triggers
	}
	cols, indexes, triggers := shape()

	m := outboxMigrator(t, db)
	if err := m.Partition(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	var kind string
	if err := db.SQL.QueryRow(`SELECT relkind::text FROM pg_class WHERE oid = 'outbox'::regclass`).Scan(&kind); err != nil || kind != "p" {
		t.Fatalf("relkind = %q, %v; want p", kind, err)
	}
	// ids up to 2500 were taken: the first partition ends at 4000, one
	// to two partitions ahead, and the next one covers ids up to two
	// partitions past the highest.
	want := []string{"outbox_default DEFAULT", "outbox_p0 FOR VALUES FROM (MINVALUE) TO ('4000')",
		"outbox_p4000 FOR VALUES FROM ('4000') TO ('5000')"}
	if got := partitionsOf(t, db); !slices.Equal(got, want) {
		t.Fatalf("partitions = %q; want %q", got, want)
	}
	cols2, indexes2, triggers2 := shape()
	if !slices.Equal(cols, cols2) || !slices.Equal(indexes, indexes2) || !slices.Equal(triggers, triggers2) {
		t.Fatalf("the parent differs from the table:\ncolumns %q\n   were %q\nindexes %q\n   were %q\ntriggers %q\n    were %q",
			cols2, cols, indexes2, indexes, triggers2, triggers)
	}
	var public bool
	if err := db.SQL.QueryRow(`SELECT has_table_privilege('public', 'outbox', 'INSERT')`).Scan(&public); err != nil || !public {
		t.Fatalf("PUBLIC's INSERT on the parent = %v, %v; want it kept", public, err)
	}
	// The identity goes on after the last id, and rows keep their ids.
	var id int64
	if err := db.SQL.QueryRow(`INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload)
		VALUES (gen_random_uuid(), 't', 'a', 'e', '\x00') RETURNING id`).Scan(&id); err != nil || id != 2501 {
		t.Fatalf("next id = %d, %v; want 2501", id, err)
	}
	var n, dead int64
	if err := db.SQL.QueryRow(`SELECT count(*), count(*) FILTER (WHERE state = 'dead' AND id = 3) FROM outbox`).Scan(&n, &dead); err != nil || n != 2501 || dead != 1 {
		t.Fatalf("rows = %d (dead %d), %v; want 2501 (1)", n, dead, err)
	}
	// Again: nothing to convert, nothing missing ahead.
	if err := m.Partition(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	if got := partitionsOf(t, db); !slices.Equal(got, want) {
		t.Fatalf("partitions after a second Partition = %q; want %q", got, want)
	}
}

// The partitions belong to the table's owner, whoever converts the table
// or creates them ahead (here a superuser): a relay whose role is the
// owner's drops them past retention and prunes the default partition
// directly, which a partition of another owner refuses it.
func TestPartitionsBelongToTheTablesOwner(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	ctx := context.Background()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.SQL.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	role := "txo_owner_" + db.Schema[len(db.Schema)-8:]
	exec(`CREATE ROLE ` + role)
	t.Cleanup(func() {
		for _, stmt := range []string{`DROP OWNED BY ` + role + ` CASCADE`, `DROP ROLE ` + role} {
			if _, err := db.SQL.Exec(stmt); err != nil {
				t.Logf("%s: %v", stmt, err)
			}
		}
	})
	exec(`ALTER TABLE outbox OWNER TO ` + role)
	m := outboxMigrator(t, db)
	if err := m.Partition(ctx, 100); err != nil {
		t.Fatal(err)
	}
	exec(`SELECT setval(pg_get_serial_sequence('outbox', 'id'), 350)`)
	exec(`INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 't', 'a', 'e', '\x00')`)
	if err := m.Partition(ctx, 100); err != nil { // creates partitions ahead
		t.Fatal(err)
	}
	owners := texts(t, db, `SELECT c.relname || ' ' || pg_get_userbyid(c.relowner) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = to_regclass(quote_ident($1) || '.outbox') ORDER BY c.relname`, db.Schema)
	if len(owners) < 5 {
		t.Fatalf("partitions %q; want the first, the default and three ahead", owners)
	}
	for _, o := range owners {
		if !strings.HasSuffix(o, " "+role) {
			t.Errorf("partition %s; want it owned by %s", o, role)
		}
	}
}
