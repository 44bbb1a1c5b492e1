package engines_test

import (
	"context"
	"errors"
	"slices"
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
// table at version 1 is too old for the relay (MySQLLatest).
func TestMySQLVersion2MovesFewerIndexes(t *testing.T) {
	t.Parallel()
	testkit.MySQLURL(t)
	ctx := context.Background()
	db := testkit.NewDBOn(t, testkit.MySQL)
	m, err := migrations.New(db.SQL, migrations.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if applied, err := m.Up(ctx); err != nil || !slices.Equal(applied, []int{1, 2}) {
		t.Fatalf("Up = %v, %v; want versions 1 and 2", applied, err)
	}
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
	if applied, err := m.Up(ctx); err != nil || !slices.Equal(applied, []int{2}) {
		t.Fatalf("Up from version 1 = %v, %v; want version 2", applied, err)
	}
	if got := indexes(); !slices.Equal(got, v2) {
		t.Fatalf("indexes after Up from version 1: %v, want %v", got, v2)
	}
	if err := m.Check(ctx, migrations.Outbox.MySQLLatest()); err != nil {
		t.Fatalf("Check at version 2 = %v", err)
	}
	if n := mustColumn[int](t, db.SQL, `SELECT COUNT(*) FROM outbox`)[0]; n != 3 {
		t.Fatalf("%d rows after Down and Up, want 3", n)
	}
}
