package engines_test

import (
	"context"
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
