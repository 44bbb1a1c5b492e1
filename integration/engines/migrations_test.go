package engines_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// TestUpStatusDownOnEveryEngine: each set migrates up, reports its
// versions, reverts and migrates up again on every engine.
func TestUpStatusDownOnEveryEngine(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		ctx := context.Background()
		db := testkit.NewDBOn(t, e)
		for _, set := range []migrations.Set{migrations.Outbox, migrations.Inbox} {
			m, err := migrations.New(db.SQL, migrations.Config{Set: set, Table: db.Table()})
			if err != nil {
				t.Fatal(err)
			}
			applied, err := m.Up(ctx)
			if err != nil || len(applied) == 0 {
				t.Fatalf("Up = %v, %v", applied, err)
			}
			if again, err := m.Up(ctx); err != nil || len(again) != 0 {
				t.Fatalf("a second Up = %v, %v; want nothing applied", again, err)
			}
			st, err := m.Status(ctx)
			if err != nil || len(st) != len(applied) || slices.ContainsFunc(st, func(s migrations.Status) bool { return s.AppliedAt == nil }) {
				t.Fatalf("Status = %+v, %v; want every version applied", st, err)
			}
			if err := m.Check(ctx, set.Latest()); e.Dialect == testkit.Postgres.Dialect && err != nil {
				t.Fatalf("Check = %v", err)
			}
			if v, err := m.Down(ctx); err != nil || v != applied[len(applied)-1] {
				t.Fatalf("Down = %d, %v; want %d", v, err, applied[len(applied)-1])
			}
			if again, err := m.Up(ctx); err != nil || len(again) != 1 {
				t.Fatalf("Up after Down = %v, %v; want the reverted version", again, err)
			}
		}
	})
}

// TestMySQLMigrationLockIsPerDatabase: GET_LOCK's names are the
// server's; the migrator's holds the database, so a migrator of the same
// table in another database does not wait on it, and one in the same
// database does.
func TestMySQLMigrationLockIsPerDatabase(t *testing.T) {
	t.Parallel()
	testkit.MySQLURL(t)
	ctx := context.Background()
	a, b := testkit.NewDBOn(t, testkit.MySQL), testkit.NewDBOn(t, testkit.MySQL)
	holder, err := a.SQL.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	var got int
	args := outboxsql.MySQLMigrateLockArgs{Table: "outbox", Timeout: time.Second}
	if err := holder.QueryRowContext(ctx, outboxsql.MySQLMigrateLock, args.Args()...).Scan(&got); err != nil || got != 1 {
		t.Fatalf("take database a's lock: %d, %v", got, err)
	}

	mb, err := migrations.New(b.SQL, migrations.Config{})
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithTimeout(ctx, 20*time.Second)
	defer bcancel()
	if _, err := mb.Up(bctx); err != nil {
		t.Fatalf("database b's migrator waited on a's lock or failed: %v", err)
	}
	ma, err := migrations.New(a.SQL, migrations.Config{})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := ma.Up(short); err == nil {
		t.Fatal("database a's migrator ran while its lock was held")
	}
}

// TestMySQLVersion2MovesFewerIndexes: the MySQL outbox's version 2 drops
// the secondary indexes a mark moved and no statement needs, and its
// down gives version 1's back, with rows in the table either way; a
// table at version 1 is too old for the relay (MySQLLatest). It runs at
// version 2, below version 3's columns.
func TestMySQLVersion2MovesFewerIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, m := mysqlAtVersion2(t)
	indexes := func() []string {
		t.Helper()
		names := mustColumn[string](t, db.SQL, `SELECT DISTINCT index_name FROM information_schema.statistics
			WHERE table_schema = DATABASE() AND table_name = 'outbox'`)
		slices.Sort(names)
		return names
	}
	v2 := []string{"PRIMARY", "outbox_aggregate_idx", "outbox_due_idx", "outbox_event_idx", "outbox_lane_idx", "outbox_prune_idx"}
	v1 := []string{"PRIMARY", "outbox_aggregate_idx", "outbox_due_idx", "outbox_event_idx", "outbox_fresh_idx", "outbox_prune_idx",
		"outbox_retry_idx", "outbox_state_idx", "outbox_topic_due_idx"}
	if got := indexes(); !slices.Equal(got, v2) {
		t.Fatalf("indexes at version 2: %v, want %v", got, v2)
	}
	if _, err := db.SQL.ExecContext(ctx, `INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, headers, created_at, state, published_at)
		VALUES (UUID(), 't', 'a', 'e', '{}', '{}', UTC_TIMESTAMP(6), 'pending', NULL),
		       (UUID(), 't', 'a', 'e', '{}', '{}', UTC_TIMESTAMP(6), 'dead', NULL),
		       (UUID(), 't', 'b', 'e', '{}', '{}', UTC_TIMESTAMP(6), 'published', UTC_TIMESTAMP(6))`); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Down(ctx); err != nil || v != 2 {
		t.Fatalf("Down = %d, %v; want 2", v, err)
	}
	if got := indexes(); !slices.Equal(got, v1) {
		t.Fatalf("indexes after Down to version 1: %v, want %v", got, v1)
	}
	if err := m.Check(ctx, migrations.Outbox.MySQLLatest()); !errors.Is(err, migrations.ErrSchemaTooOld) {
		t.Fatalf("Check at version 1 = %v, want ErrSchemaTooOld", err)
	}
	if applied, err := m.Up(ctx); err != nil || !slices.Equal(applied, []int{2, 3}) {
		t.Fatalf("Up from version 1 = %v, %v; want versions 2 and 3", applied, err)
	}
	if got := indexes(); !slices.Equal(got, v2) {
		t.Fatalf("indexes after Up from version 1: %v, want %v", got, v2)
	}
	if err := m.Check(ctx, migrations.Outbox.MySQLLatest()); err != nil {
		t.Fatalf("Check at version 3 = %v", err)
	}
	if n := mustColumn[int](t, db.SQL, `SELECT COUNT(*) FROM outbox`)[0]; n != 3 {
		t.Fatalf("%d rows after Down and Up, want 3", n)
	}
}

// TestMySQLVersion3ConvertsLeases: version 3 stores a lease's holder as
// its key and an unset lease or published_at as values, not NULL. Up
// converts version 2's rows: the NULLs become those values, and a leased
// row keeps its lease under its holder's key (a token of 16 bytes too);
// its statements run again over a table they converted change nothing
// (the migrator's rule for MySQL). Down gives back the token of each
// holder still in the relays table, the key in hex of any other, and the
// NULLs.
func TestMySQLVersion3ConvertsLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, m := mysqlAtVersion2(t)

	// At version 2: three leases, of a live relay, of a live relay whose
	// token has 16 bytes, and of one that left; and no lease on the rest.
	const live, short, gone, until = "relay-a#0123abcd", "relay07#89abcdef", "relay-gone#fedcba98", "2030-01-02 03:04:05.678901"
	if len(short) != 16 {
		t.Fatal("the short token is not 16 bytes long")
	}
	exec := func(query string, args ...any) {
		t.Helper()
		if _, err := db.SQL.ExecContext(ctx, query, args...); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
	}
	exec(`INSERT INTO outbox_relays (id, started_at, heartbeat_at) VALUES (?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)), (?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`, live, short)
	exec(`INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, headers, created_at, state, lease_owner, lease_expires_at, published_at)
		VALUES (UUID(), 't', 'a', 'e', '{}', '{}', UTC_TIMESTAMP(6), 'pending', NULL, NULL, NULL),
		       (UUID(), 't', 'b', 'e', '{}', '{}', UTC_TIMESTAMP(6), 'pending', ?, ?, NULL),
		       (UUID(), 't', 'c', 'e', '{}', '{}', UTC_TIMESTAMP(6), 'pending', ?, ?, NULL),
		       (UUID(), 't', 'd', 'e', '{}', '{}', UTC_TIMESTAMP(6), 'pending', ?, ?, NULL),
		       (UUID(), 't', 'e', 'e', '{}', '{}', UTC_TIMESTAMP(6), 'dead', NULL, NULL, NULL),
		       (UUID(), 't', 'f', 'e', '{}', '{}', UTC_TIMESTAMP(6), 'published', NULL, NULL, ?)`,
		live, until, short, until, gone, until, until)

	// Each row as text: state, lease owner (hex at version 3), lease end
	// and published_at, "-" for NULL.
	rows := func() []string {
		t.Helper()
		return mustColumn[string](t, db.SQL, `SELECT CONCAT_WS(' ', state,
			COALESCE(IF(LENGTH(lease_owner) = 16 AND lease_owner NOT IN (SELECT id FROM outbox_relays), LOWER(HEX(lease_owner)), lease_owner), '-'),
			COALESCE(CAST(lease_expires_at AS CHAR), '-'), COALESCE(CAST(published_at AS CHAR), '-'))
			FROM outbox ORDER BY id`)
	}
	hexKey := func(token string) string { return fmt.Sprintf("%x", outboxsql.MySQLLeaseKey(token)) }
	const never = "1000-01-01 00:00:00.000000"
	none := strings.Repeat("00", 16) + " " + never
	v2 := []string{
		"pending - - -",
		"pending " + live + " " + until + " -",
		"pending " + short + " " + until + " -",
		"pending " + gone + " " + until + " -",
		"dead - - -",
		"published - - " + until,
	}
	if got := rows(); !slices.Equal(got, v2) {
		t.Fatalf("rows at version 2:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(v2, "\n"))
	}
	v3 := []string{
		"pending " + none + " " + never,
		"pending " + hexKey(live) + " " + until + " " + never,
		"pending " + hexKey(short) + " " + until + " " + never,
		"pending " + hexKey(gone) + " " + until + " " + never,
		"dead " + none + " " + never,
		"published " + none + " " + until,
	}
	if applied, err := m.Up(ctx); err != nil || !slices.Equal(applied, []int{3}) {
		t.Fatalf("Up from version 2 = %v, %v; want version 3", applied, err)
	}
	if got := rows(); !slices.Equal(got, v3) {
		t.Fatalf("rows at version 3:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(v3, "\n"))
	}

	// Up's statements again, as after a run interrupted before it recorded
	// the version.
	up, err := fs.ReadFile(migrations.Outbox.MySQLFS(), "0003_fixed_lease.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range outboxsql.SplitStatements(string(up)) {
		exec(stmt)
	}
	if got := rows(); !slices.Equal(got, v3) {
		t.Fatalf("rows after version 3's statements ran again:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(v3, "\n"))
	}

	// Down: the live relays' tokens come back, the key of the one that
	// left stays, in hex.
	if v, err := m.Down(ctx); err != nil || v != 3 {
		t.Fatalf("Down = %d, %v; want 3", v, err)
	}
	down := slices.Clone(v2)
	down[3] = "pending " + hexKey(gone) + " " + until + " -"
	if got := rows(); !slices.Equal(got, down) {
		t.Fatalf("rows after Down to version 2:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(down, "\n"))
	}
	if typ := mustColumn[string](t, db.SQL, `SELECT COLUMN_TYPE FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox' AND COLUMN_NAME = 'state'`)[0]; typ != "varchar(9)" {
		t.Fatalf("state is %s after Down, want varchar(9)", typ)
	}
	// Up again: the hex left for the holder that left is a token to it,
	// whose key no relay has either.
	if applied, err := m.Up(ctx); err != nil || !slices.Equal(applied, []int{3}) {
		t.Fatalf("Up again = %v, %v; want version 3", applied, err)
	}
	again := slices.Clone(v3)
	again[3] = "pending " + hexKey(hexKey(gone)) + " " + until + " " + never
	if got := rows(); !slices.Equal(got, again) {
		t.Fatalf("rows at version 3 again:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(again, "\n"))
	}
}

// mysqlAtVersion2 is a MySQL database of the test's own migrated up to the
// latest version and down to version 2, and its migrator.
func mysqlAtVersion2(t *testing.T) (*testkit.DB, *migrations.Migrator) {
	t.Helper()
	testkit.MySQLURL(t)
	db := testkit.NewDBOn(t, testkit.MySQL)
	m, err := migrations.New(db.SQL, migrations.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if applied, err := m.Up(context.Background()); err != nil || !slices.Equal(applied, []int{1, 2, 3}) {
		t.Fatalf("Up = %v, %v; want versions 1 to 3", applied, err)
	}
	if v, err := m.Down(context.Background()); err != nil || v != 3 {
		t.Fatalf("Down = %d, %v; want 3", v, err)
	}
	return db, m
}
