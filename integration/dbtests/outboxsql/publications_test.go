package outboxsql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// publicationsDatabase holds these tests' schemas: a FOR ALL TABLES
// publication naming a slot in its marker would make every outbox of the
// shared test database look streamed to other packages' relays.
const publicationsDatabase = "txoutbox_test_publications"

// publicationsBundle is an outbox in a database of its own with a logical
// slot named in the marker of any publication the test makes, as a WAL
// relay's would be.
type publicationsBundle struct {
	s     *testkit.Schema
	table string // the outbox's quoted name
	slot  string
}

func newPublicationsBundle(t *testing.T) publicationsBundle {
	t.Helper()
	testkit.RequireLogical(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dbURL, err := testkit.EnsureDatabase(ctx, testkit.ServerURL(), publicationsDatabase)
	if err != nil {
		t.Fatal(err)
	}
	s := testkit.NewSchema(t, dbURL, testkit.SchemaName("p_"+t.Name()), true)
	b := publicationsBundle{s: s, table: s.Table().String(), slot: "s_" + s.Name}
	b.exec(t, `CREATE TABLE other (id int)`,
		`CREATE TABLE parted (id int) PARTITION BY RANGE (id)`,
		`CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (10)`,
		`SELECT pg_create_logical_replication_slot('`+b.slot+`', 'pgoutput')`)
	t.Cleanup(func() { _, _ = s.SQL.Exec(`SELECT pg_drop_replication_slot($1)`, b.slot) })
	return b
}

// suffix is the random end of the bundle's schema name, for names of its
// own that stay short of PostgreSQL's 63 bytes.
func (b publicationsBundle) suffix() string { return b.s.Name[strings.LastIndexByte(b.s.Name, '_')+1:] }

func (b publicationsBundle) exec(t *testing.T, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := b.s.SQL.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// publish creates publication name with the WAL relay's marker naming the
// bundle's slot; it is dropped when the test ends.
func (b publicationsBundle) publish(t *testing.T, name, what string) {
	t.Helper()
	b.exec(t, `CREATE PUBLICATION `+name+` `+what,
		`COMMENT ON PUBLICATION `+name+` IS 'txoutbox: slot `+b.slot+` up to 0/1 publication x'`)
	t.Cleanup(func() { _, _ = b.s.SQL.Exec(`DROP PUBLICATION IF EXISTS ` + name) })
}

// streamedBy runs the three checks of a WAL relay's slot on table (the
// polling relay's, the operators', and the writer's table-less events)
// through q, and returns whether the first two found slot and whether
// the third would emit. Slots of other runs' leftovers in the database
// (a run killed before its cleanup) may be found too; only slot counts.
func streamedBy(t *testing.T, ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, table, slot string) (relay, ops, emits bool) {
	t.Helper()
	var relaySlots, opsSlots string
	args := outboxsql.WALSlotsArgs{Table: table, Slot: "not_" + slot}.Args()
	if err := q.QueryRowContext(ctx, outboxsql.RelayWALSlots, args...).Scan(&relaySlots); err != nil {
		t.Fatalf("RelayWALSlots: %v", err)
	}
	if err := q.QueryRowContext(ctx, outboxsql.OpsWALSlots, args...).Scan(&opsSlots); err != nil {
		t.Fatalf("OpsWALSlots: %v", err)
	}
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM (`+outboxsql.WALEmit(1)+`) e`, table, []byte("x")).Scan(&n); err != nil {
		t.Fatalf("WALEmit: %v", err)
	}
	return slices.Contains(strings.Split(relaySlots, ", "), slot), slices.Contains(strings.Split(opsSlots, ", "), slot), n == 1
}

// A WAL relay's slot is found through any publication that carries the
// table's changes: one that lists it, its schema, all tables, or a
// partitioned table it is a partition of; for a partitioned table, one
// that lists it whether or not it publishes through the root (without,
// pg_get_publication_tables listed only the partitions, and a check of
// the root found nothing though the slot streams its rows); not one that
// carries other tables only. Not parallel: its FOR ALL TABLES
// publication carries the other test's outbox too.
func TestWALSlotFoundThroughEveryKindOfPublication(t *testing.T) {
	b := newPublicationsBundle(t)
	ctx := context.Background()
	var version int
	if err := b.s.SQL.QueryRow(`SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	parted, part := `"`+b.s.Name+`".parted`, `"`+b.s.Name+`".parted_1`
	for i, c := range []struct {
		name, what, table string
		found             bool
	}{
		{"other", `FOR TABLE other`, b.table, false},
		{"table", `FOR TABLE ` + b.table, b.table, true},
		{"schema", `FOR TABLES IN SCHEMA "` + b.s.Name + `"`, b.table, true},
		{"alltables", `FOR ALL TABLES`, b.table, true},
		{"root via root", `FOR TABLE parted WITH (publish_via_partition_root = true)`, parted, true},
		{"root", `FOR TABLE parted`, parted, true},
		{"partition", `FOR TABLE parted`, part, true},
		{"partition's schema", `FOR TABLES IN SCHEMA "` + b.s.Name + `"`, part, true},
		{"partition of another", `FOR TABLE other`, part, false},
	} {
		if strings.Contains(c.what, "IN SCHEMA") && version < 150000 {
			continue // PostgreSQL 15's
		}
		pub := fmt.Sprintf("p%d_%s", i, b.suffix())
		b.publish(t, pub, c.what)
		relay, ops, emits := streamedBy(t, ctx, b.s.SQL, c.table, b.slot)
		if relay != c.found || ops != c.found || emits != c.found {
			t.Errorf("%s: relay check %v, operators' check %v, writer emits %v; want %v", c.name, relay, ops, emits, c.found)
		}
		b.exec(t, `DROP PUBLICATION `+pub)
	}
}

// A publication dropped after a statement's snapshot was taken fails
// none of the checks of a WAL relay's slot (writers' and operators'
// statements alike), and they still find the slot: they read the
// publications of their snapshot. Looked up by name
// (pg_get_publication_tables), the dropped one failed each of them with
// "publication ... does not exist"; a REPEATABLE READ transaction makes
// the drop land between the snapshot and the look-up every time.
func TestWALSlotChecksSurviveADroppedPublication(t *testing.T) {
	b := newPublicationsBundle(t)
	ctx := context.Background()
	// The dropped one is made first: the checks stop at the first
	// publication that matches, in the catalog's order.
	q := "q_" + b.suffix()
	b.publish(t, q, `FOR TABLE other`)
	b.publish(t, "p_"+b.suffix(), `FOR TABLE `+b.table)
	tx, err := b.s.SQL.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT 1`); err != nil { // the snapshot
		t.Fatal(err)
	}
	b.exec(t, `DROP PUBLICATION `+q)
	if relay, ops, emits := streamedBy(t, ctx, tx, b.table, b.slot); !relay || !ops || !emits {
		t.Fatalf("relay check %v, operators' check %v, writer emits %v; want the slot found by each", relay, ops, emits)
	}
	// The trigger of schema version 11 refuses a delayed event on the
	// streamed table, rather than failing on the dropped publication.
	_, err = tx.ExecContext(ctx, `INSERT INTO `+b.table+` (event_id, topic, aggregate_id, event_type, payload, not_before)
        VALUES (gen_random_uuid(), 't', 'a', 'e', '\x00', now() + interval '1 hour')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != outboxsql.NotBeforeStreamedCode {
		t.Fatalf("a delayed event on the streamed table: %v; want SQLSTATE %s", err, outboxsql.NotBeforeStreamedCode)
	}
}
