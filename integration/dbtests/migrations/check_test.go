package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// Latest is the newest of the embedded files' versions, whatever it is.
func TestLatestIsTheNewestFile(t *testing.T) {
	t.Parallel()
	for _, set := range []migrations.Set{migrations.Outbox, migrations.Inbox} {
		ups, err := fs.Glob(set.FS(), "*.up.sql")
		if err != nil || len(ups) == 0 {
			t.Fatalf("no up files: %v", err)
		}
		slices.Sort(ups)
		if want, _ := strconv.Atoi(ups[len(ups)-1][:4]); set.Latest() != want {
			t.Errorf("Latest = %d; the newest file is %s", set.Latest(), ups[len(ups)-1])
		}
	}
}

// Check tells a table older than needed (naming outbox migrate up) from
// one that is current, and changes nothing.
func TestCheckRefusesAnOlderSchema(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	ctx := context.Background()
	m := outboxMigrator(t, db)
	latest := migrations.Outbox.Latest()
	err := m.Check(ctx, latest)
	if !errors.Is(err, migrations.ErrSchemaTooOld) || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "run outbox migrate up") {
		t.Fatalf("Check before Up = %v; want ErrSchemaTooOld: the table does not exist, run outbox migrate up", err)
	}
	if relationExists(t, db, db.Schema, "outbox_schema_migrations") {
		t.Fatal("Check created the version table")
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Check(ctx, latest); err != nil {
		t.Fatalf("Check after Up = %v", err)
	}
	testkit.RevertOutboxTo(t, db.SQL, db.Table(), 8)
	if err := m.Check(ctx, 8); err != nil {
		t.Errorf("Check(8) at version 8 = %v", err)
	}
	err = m.Check(ctx, latest)
	if !errors.Is(err, migrations.ErrSchemaTooOld) || !strings.Contains(err.Error(), "versions 9, 10") || !strings.Contains(err.Error(), "run outbox migrate up") {
		t.Fatalf("Check(%d) at version 8 = %v; want ErrSchemaTooOld naming versions 9 on and outbox migrate up", latest, err)
	}
	if err := m.Check(ctx, latest+1); err == nil || errors.Is(err, migrations.ErrSchemaTooOld) {
		t.Errorf("Check(%d), past the set's versions = %v; want a caller's error", latest+1, err)
	}
}

// A version the set does not have (a newer release's) is refused by
// Check, Up and Down, which change nothing, and shown by Status.
func TestUnknownVersionIsRefused(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	ctx := context.Background()
	m := outboxMigrator(t, db)
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.RecordOutboxVersion(t, db.SQL, db.Table(), 99, "from_the_future")
	tooNew := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, migrations.ErrSchemaTooNew) || !strings.Contains(err.Error(), "version 99") {
			t.Errorf("%s = %v; want ErrSchemaTooNew naming version 99", what, err)
		}
	}
	tooNew("Check", m.Check(ctx, 0))
	applied, err := m.Up(ctx)
	tooNew("Up", err)
	if len(applied) != 0 {
		t.Errorf("Up applied %v", applied)
	}
	reverted, err := m.Down(ctx)
	tooNew("Down", err)
	if reverted != 0 {
		t.Errorf("Down reverted %d", reverted)
	}
	tooNew("Partition", m.Partition(ctx, 1000))
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := st[len(st)-1]
	if last.Version != 99 || !last.Unknown || last.Name != "from_the_future" || last.AppliedAt == nil {
		t.Fatalf("Status ends with %+v; want version 99, unknown, with its recorded name", last)
	}
	for _, s := range st[:len(st)-1] {
		if s.AppliedAt == nil || s.Unknown {
			t.Errorf("Status: %+v; want every known version applied and known", s)
		}
	}
}

// A table migrated by another tool from the exported files has no version
// table: Check cannot tell its version and lets it be.
func TestCheckTrustsATableOfAnotherTool(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	if _, err := db.SQL.Exec(`CREATE TABLE outbox (id bigint)`); err != nil {
		t.Fatal(err)
	}
	if err := outboxMigrator(t, db).Check(context.Background(), migrations.Outbox.Latest()); err != nil {
		t.Fatalf("Check = %v; want nil", err)
	}
}

// A role that may not read the version table is told the GRANT it lacks.
func TestCheckNamesTheGrantItLacks(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	ctx := context.Background()
	if _, err := outboxMigrator(t, db).Up(ctx); err != nil {
		t.Fatal(err)
	}
	role := "txo_reader_" + db.Schema[len(db.Schema)-8:]
	for _, q := range []string{`CREATE ROLE ` + role + ` LOGIN`, `GRANT USAGE ON SCHEMA "` + db.Schema + `" TO ` + role} {
		if _, err := db.SQL.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, q := range []string{`DROP OWNED BY ` + role + ` CASCADE`, `DROP ROLE ` + role} {
			if _, err := db.SQL.Exec(q); err != nil {
				t.Logf("%s: %v", q, err)
			}
		}
	})
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	as, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer as.Close()
	m, err := migrations.New(as, migrations.Config{Table: db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Check(ctx, migrations.Outbox.Latest())
	if err == nil || !strings.Contains(err.Error(), "GRANT SELECT ON") || !strings.Contains(err.Error(), "outbox_schema_migrations") {
		t.Fatalf("Check as a role without SELECT on the version table = %v; want the GRANT", err)
	}
}
