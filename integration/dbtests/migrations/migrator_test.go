package migrations_test

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// relationExists reports whether schema holds the table or index name.
func relationExists(t *testing.T, db *testkit.DB, schema, name string) bool {
	t.Helper()
	var ok bool
	if err := db.SQL.QueryRow("SELECT to_regclass($1) IS NOT NULL", `"`+schema+`"."`+name+`"`).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// notBeforeCallsGetPublicationTables reports whether the schema's
// outbox_not_before function looks publications up by name (versions 7
// to 10), rather than reading the catalogs (version 11).
func notBeforeCallsGetPublicationTables(t *testing.T, db *testkit.DB) bool {
	t.Helper()
	var src string
	if err := db.SQL.QueryRow(`SELECT prosrc FROM pg_proc WHERE oid = $1::regprocedure`, `"`+db.Schema+`".outbox_not_before()`).Scan(&src); err != nil {
		t.Fatal(err)
	}
	return strings.Contains(src, "pg_get_publication_tables")
}

// notBeforeTriggerJudgesTheClock reports whether the schema's
// outbox_not_before trigger fires only for a not_before ahead of the
// statement's clock (version 12), rather than for every one (versions 7
// to 11).
func notBeforeTriggerJudgesTheClock(t *testing.T, db *testkit.DB) bool {
	t.Helper()
	var def string
	if err := db.SQL.QueryRow(`SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = 'outbox_not_before'`,
		`"`+db.Schema+`".outbox`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	return strings.Contains(def, "statement_timestamp()")
}

// down reverts the latest applied migration, and stops the test unless
// Down reports want: that migration's version, or 0 when none was applied.
func down(t *testing.T, m *migrations.Migrator, want int) {
	t.Helper()
	if v, err := m.Down(context.Background()); err != nil || v != want {
		t.Fatalf("Down = %d, %v; want %d", v, err, want)
	}
}

// outboxMigrator returns a migrator of the outbox set into db's schema.
func outboxMigrator(t *testing.T, db *testkit.DB) *migrations.Migrator {
	t.Helper()
	m, err := migrations.New(db.SQL, migrations.Config{Table: txoutbox.Table{Schema: db.Schema}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestUpUpDownUp(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	ctx := context.Background()
	m := outboxMigrator(t, db)
	if applied, err := m.Up(ctx); err != nil || !slices.Equal(applied, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}) {
		t.Fatalf("first Up = %v, %v; want [1 2 3 4 5 6 7 8 9 10 11 12]", applied, err)
	}
	if applied, err := m.Up(ctx); err != nil || len(applied) != 0 {
		t.Fatalf("second Up = %v, %v; want a no-op", applied, err)
	}
	st, err := m.Status(ctx)
	if err != nil || len(st) != 12 || st[0].AppliedAt == nil || st[0].Name != "outbox" || st[1].AppliedAt == nil || st[1].Name != "fencing" ||
		st[2].AppliedAt == nil || st[2].Name != "hot_claims" || st[3].AppliedAt == nil || st[3].Name != "lag_index" ||
		st[4].AppliedAt == nil || st[4].Version != 5 || st[4].Name != "cost_indexes" ||
		st[5].AppliedAt == nil || st[5].Version != 6 || st[5].Name != "operator_indexes" ||
		st[6].AppliedAt == nil || st[6].Version != 7 || st[6].Name != "not_before" ||
		st[7].AppliedAt == nil || st[7].Version != 8 || st[7].Name != "claim_floor" ||
		st[8].AppliedAt == nil || st[8].Version != 9 || st[8].Name != "partitions" ||
		st[9].AppliedAt == nil || st[9].Version != 10 || st[9].Name != "quiet_coordination" ||
		st[10].AppliedAt == nil || st[10].Version != 11 || st[10].Name != "catalog_publications" ||
		st[11].AppliedAt == nil || st[11].Version != 12 || st[11].Name != "not_before_clock" {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	for _, tbl := range []string{"outbox", "outbox_relays", "outbox_shards", "outbox_claim_floor"} {
		if !relationExists(t, db, db.Schema, tbl) {
			t.Fatalf("%s missing after Up", tbl)
		}
	}
	var fillfactor string
	if err := db.SQL.QueryRow(`SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = $1::regclass`, `"`+db.Schema+`".outbox`).Scan(&fillfactor); err != nil || fillfactor != "fillfactor=50" {
		t.Fatalf("outbox options after Up = %q, %v; want fillfactor=50 (version 3)", fillfactor, err)
	}
	if relationExists(t, db, db.Schema, "outbox_lag_idx") {
		t.Fatal("outbox_lag_idx after Up; want it replaced by outbox_due_idx (version 7)")
	}
	if !relationExists(t, db, db.Schema, "outbox_due_idx") || !relationExists(t, db, db.Schema, "outbox_scheduled_idx") {
		t.Fatal("outbox_due_idx or outbox_scheduled_idx missing after Up; want both (version 7)")
	}
	var floorRows int
	if err := db.SQL.QueryRow(`SELECT count(*) FROM "` + db.Schema + `".outbox_claim_floor WHERE floor = 0`).Scan(&floorRows); err != nil || floorRows != 1 {
		t.Fatalf("claim floor rows after Up: %d, %v; want one at 0 (version 8)", floorRows, err)
	}
	var relayOpts string
	if err := db.SQL.QueryRow(`SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = $1::regclass`, `"`+db.Schema+`".outbox_relays`).Scan(&relayOpts); err != nil || relayOpts != "autovacuum_vacuum_threshold=1000" {
		t.Fatalf("outbox_relays options after Up = %q, %v; want autovacuum_vacuum_threshold=1000 (version 10)", relayOpts, err)
	}
	if notBeforeCallsGetPublicationTables(t, db) {
		t.Fatal("outbox_not_before calls pg_get_publication_tables after Up; want the catalogs read (version 11)")
	}
	if !notBeforeTriggerJudgesTheClock(t, db) {
		t.Fatal("outbox_not_before fires for every not_before after Up; want only one ahead of the statement's clock (version 12)")
	}
	down(t, m, 12) // one version at a time
	if notBeforeTriggerJudgesTheClock(t, db) {
		t.Fatal("outbox_not_before after Down to 11 still judges the clock; want version 11's trigger back")
	}
	down(t, m, 11)
	if !notBeforeCallsGetPublicationTables(t, db) {
		t.Fatal("outbox_not_before after Down to 10 does not call pg_get_publication_tables; want version 9's check back")
	}
	down(t, m, 10)
	var reset bool
	if err := db.SQL.QueryRow(`SELECT reloptions IS NULL FROM pg_class WHERE oid = $1::regclass`, `"`+db.Schema+`".outbox_relays`).Scan(&reset); err != nil || !reset {
		t.Fatalf("outbox_relays options reset after Down to 9: %v, %v", reset, err)
	}
	down(t, m, 9)
	down(t, m, 8)
	if relationExists(t, db, db.Schema, "outbox_claim_floor") {
		t.Fatal("outbox_claim_floor after Down to 7")
	}
	down(t, m, 7)
	if !relationExists(t, db, db.Schema, "outbox_lag_idx") {
		t.Fatal("outbox_lag_idx missing after Down to 6; want it back (version 4)")
	}
	var notBefore bool
	if err := db.SQL.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'not_before' AND NOT attisdropped)`,
		`"`+db.Schema+`".outbox`).Scan(&notBefore); err != nil || notBefore {
		t.Fatalf("not_before after Down to 6: %v, %v; want it gone", notBefore, err)
	}
	if !relationExists(t, db, db.Schema, "outbox_event_idx") {
		t.Fatal("outbox_event_idx missing after Up; want it (version 6)")
	}
	down(t, m, 6)
	if relationExists(t, db, db.Schema, "outbox_event_idx") {
		t.Fatal("outbox_event_idx after Down; want it gone")
	}
	down(t, m, 5)
	down(t, m, 4)
	if relationExists(t, db, db.Schema, "outbox_lag_idx") {
		t.Fatal("outbox_lag_idx after Down; want it gone")
	}
	down(t, m, 3)
	down(t, m, 2)
	down(t, m, 1)
	if relationExists(t, db, db.Schema, "outbox") {
		t.Fatal("outbox still there after Down")
	}
	down(t, m, 0) // nothing applied: a no-op
	if st, _ := m.Status(ctx); st[0].AppliedAt != nil {
		t.Fatalf("Status after Down = %+v", st)
	}
	if applied, err := m.Up(ctx); err != nil || len(applied) != 12 {
		t.Fatalf("Up after Down = %v, %v", applied, err)
	}
	if !relationExists(t, db, db.Schema, "outbox") {
		t.Fatal("outbox missing after the second Up")
	}
}

func TestConcurrentUpAppliesOnce(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	ctx := context.Background()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total []int
		errs  []error
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := migrations.New(db.SQL, migrations.Config{Table: txoutbox.Table{Schema: db.Schema}})
			if err == nil {
				var applied []int
				applied, err = m.Up(ctx)
				mu.Lock()
				total = append(total, applied...)
				mu.Unlock()
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent Up failed: %v", errs)
	}
	slices.Sort(total)
	if !slices.Equal(total, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}) {
		t.Fatalf("versions applied across 4 goroutines = %v, want [1 2 3 4 5 6 7 8 9 10 11 12] exactly once", total)
	}
	var n int
	if err := db.SQL.QueryRow(`SELECT count(*) FROM outbox_schema_migrations`).Scan(&n); err != nil || n != 12 {
		t.Fatalf("recorded versions = %d, %v", n, err)
	}
}

func TestCustomSchemaAndTable(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	ctx := context.Background()
	table := txoutbox.Table{Schema: db.Schema + "_app", Name: "events"}
	t.Cleanup(func() { db.SQL.Exec(`DROP SCHEMA "` + table.Schema + `" CASCADE`) })
	m, err := migrations.New(db.SQL, migrations.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []string{"events", "events_relays", "events_shards", "events_schema_migrations"} {
		if !relationExists(t, db, table.Schema, tbl) {
			t.Fatalf("%s.%s missing", table.Schema, tbl)
		}
	}
	var idx int
	if err := db.SQL.QueryRow(`SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = 'events_claim_idx'`, table.Schema).Scan(&idx); err != nil || idx != 1 {
		t.Fatalf("claim index renamed: count=%d err=%v", idx, err)
	}
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	tx, _ := db.SQL.Begin()
	e, _ := txoutbox.NewEvent("t", "a", "1", "x", 1)
	if err := w.Write(ctx, tx, e); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestInjectionRefused(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	for _, table := range []txoutbox.Table{{Name: "x; drop table y"}, {Name: `a"b`}} {
		_, err := migrations.New(db.SQL, migrations.Config{Table: table})
		if !errors.Is(err, txoutbox.ErrInvalidTable) {
			t.Errorf("New(%+v) = %v, want ErrInvalidTable", table, err)
		}
	}
}

func TestFilesArePlainSQL(t *testing.T) {
	t.Parallel()
	// The files must work unchanged with golang-migrate: pairs of
	// NNNN_name.up.sql / .down.sql with the default names.
	entries, err := fs.Glob(migrations.Outbox.FS(), "*")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0001_outbox.down.sql", "0001_outbox.up.sql", "0002_fencing.down.sql", "0002_fencing.up.sql",
		"0003_hot_claims.down.sql", "0003_hot_claims.up.sql", "0004_lag_index.down.sql", "0004_lag_index.up.sql",
		"0005_cost_indexes.down.sql", "0005_cost_indexes.up.sql", "0006_operator_indexes.down.sql", "0006_operator_indexes.up.sql",
		"0007_not_before.down.sql", "0007_not_before.up.sql", "0008_claim_floor.down.sql", "0008_claim_floor.up.sql",
		"0009_partitions.down.sql", "0009_partitions.up.sql", "0010_quiet_coordination.down.sql", "0010_quiet_coordination.up.sql",
		"0011_catalog_publications.down.sql", "0011_catalog_publications.up.sql", "0012_not_before_clock.down.sql", "0012_not_before_clock.up.sql"}
	if len(entries) != len(want) {
		t.Fatalf("files = %v, want %v", entries, want)
	}
	for i := range want {
		if entries[i] != want[i] {
			t.Fatalf("files = %v, want %v", entries, want)
		}
	}
}

func TestExport(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	m, err := migrations.New(db.SQL, migrations.Config{Table: txoutbox.Table{Name: "events"}})
	if err != nil {
		t.Fatal(err)
	}
	goose, err := m.Export(migrations.FormatGoose)
	if err != nil {
		t.Fatal(err)
	}
	if len(goose) != 12 || goose[11].Name != "0012_not_before_clock.sql" || !strings.Contains(goose[11].Body, `CREATE OR REPLACE TRIGGER "events_not_before" BEFORE INSERT ON "events"`) || goose[8].Name != "0009_partitions.sql" || goose[9].Name != "0010_quiet_coordination.sql" ||
		goose[10].Name != "0011_catalog_publications.sql" || !strings.Contains(goose[10].Body, `CREATE OR REPLACE FUNCTION "events_not_before"()`) ||
		!strings.Contains(goose[9].Body, `ALTER TABLE "events_relays" SET (autovacuum_vacuum_threshold = 1000)`) || goose[5].Name != "0006_operator_indexes.sql" || goose[6].Name != "0007_not_before.sql" || goose[7].Name != "0008_claim_floor.sql" ||
		!strings.Contains(goose[7].Body, `CREATE TABLE IF NOT EXISTS "events_claim_floor"`) || !strings.Contains(goose[5].Body, `CREATE INDEX IF NOT EXISTS "events_dead_topic_idx" ON "events" (topic, id)`) ||
		goose[3].Name != "0004_lag_index.sql" || !strings.Contains(goose[3].Body, `CREATE INDEX IF NOT EXISTS "events_lag_idx" ON "events" (created_at)`) ||
		goose[4].Name != "0005_cost_indexes.sql" || !strings.Contains(goose[4].Body, `CREATE INDEX IF NOT EXISTS "events_prune_idx" ON "events"`) ||
		goose[2].Name != "0003_hot_claims.sql" || !strings.Contains(goose[2].Body, `ALTER TABLE "events" SET (fillfactor = 50)`) || goose[0].Name != "0001_outbox.sql" || goose[1].Name != "0002_fencing.sql" ||
		!strings.HasPrefix(goose[0].Body, "-- +goose Up\n") || !strings.Contains(goose[0].Body, "\n-- +goose Down\n") ||
		!strings.Contains(goose[0].Body, `CREATE TABLE "events" (`) || strings.Contains(goose[0].Body, "outbox_") ||
		!strings.Contains(goose[1].Body, `ALTER TABLE "events_relays" ADD COLUMN name`) {
		t.Fatalf("goose export = %+v", goose)
	}
	gm, err := m.Export(migrations.FormatGolangMigrate)
	if err != nil || len(gm) != 24 || gm[0].Name != "0001_outbox.up.sql" || gm[1].Name != "0001_outbox.down.sql" ||
		gm[2].Name != "0002_fencing.up.sql" || gm[3].Name != "0002_fencing.down.sql" {
		t.Fatalf("golang-migrate export = %+v, %v", gm, err)
	}
	// The exported up files apply as they are, and the down files revert them.
	for _, f := range []int{0, 2, 4, 6, 8} {
		if _, err := db.SQL.Exec(gm[f].Body); err != nil {
			t.Fatalf("apply exported %s: %v", gm[f].Name, err)
		}
	}
	if !relationExists(t, db, db.Schema, "events_shards") {
		t.Fatal("exported up did not create events_shards")
	}
	for _, f := range []int{9, 7, 5, 3, 1} {
		if _, err := db.SQL.Exec(gm[f].Body); err != nil {
			t.Fatalf("apply exported %s: %v", gm[f].Name, err)
		}
	}
	if _, err := m.Export("flyway"); err == nil || !strings.Contains(err.Error(), `unknown export format "flyway"`) {
		t.Fatalf("Export(flyway) = %v", err)
	}
}

// Version 4's index can be built beforehand with CREATE INDEX CONCURRENTLY,
// which does not block the application's writes as the migration's
// transaction does: the migration then keeps it.
func TestLagIndexBuiltConcurrentlyBeforehand(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	ctx := context.Background()
	m := outboxMigrator(t, db)
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int{12, 11, 10, 9, 8, 7, 6, 5, 4} {
		down(t, m, want)
	}
	if _, err := db.SQL.Exec(`CREATE INDEX CONCURRENTLY outbox_lag_idx ON "` + db.Schema + `".outbox (created_at) WHERE state IN ('pending', 'claimed')`); err != nil {
		t.Fatal(err)
	}
	if applied, err := m.Up(ctx); err != nil || !slices.Equal(applied, []int{4, 5, 6, 7, 8, 9, 10, 11, 12}) {
		t.Fatalf("Up over the index built beforehand = %v, %v; want [4 5 6 7 8 9 10 11 12]", applied, err)
	}
}
