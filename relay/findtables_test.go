package relay

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// FindTables finds every schema a pattern selects, whatever its name:
// spaces, quotes, non-ASCII letters, slashes and names written to break
// SQL are schemas like any other, each with its table's state. (The
// tables are made here, as the catalog is all FindTables reads.)
func TestFindTablesAnySchemaName(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	migrated := []string{"sp ace", `q"x`, "ü", "a/b", `x"; drop table y; --`}
	for _, n := range migrated {
		s := f.add(t, n, false)
		for _, table := range []string{"outbox", "outbox_relays", "outbox_shards", "outbox_claim_floor"} {
			if _, err := s.SQL.Exec(`CREATE TABLE ` + ident.Qualified(s.Name, table) + ` (id bigint)`); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.add(t, "empty 'one'", false)
	cfg := f.groupConfig(false)
	found, err := FindTables(context.Background(), f.db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ft := range found {
		got = append(got, ft.Table.Schema)
		served := slices.Contains(migrated, ft.Table.Schema[len(f.prefix)+1:])
		if ft.Exists != served || ft.Migrated != served {
			t.Errorf("%q: exists %v, migrated %v; want %v", ft.Table.Schema, ft.Exists, ft.Migrated, served)
		}
		if err := ft.Table.Validate(); err != nil {
			t.Errorf("%q: the table found is not valid: %v", ft.Table.Schema, err)
		}
	}
	var want []string
	for _, n := range append(migrated, "empty 'one'") {
		want = append(want, f.prefix+"_"+n)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("FindTables found %q; want %q", got, want)
	}

	// Listed by name, each is found as it is.
	cfg.SchemaPattern, cfg.Schemas = "", []string{f.prefix + `_q"x`, f.prefix + "_a/b"}
	found, err = FindTables(context.Background(), f.db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 || !found[0].Migrated || !found[1].Migrated {
		t.Fatalf("FindTables of a list = %+v; want both, migrated", found)
	}
	if found[1].Table != (txoutbox.Table{Schema: f.prefix + `_q"x`}) { // in schema order
		t.Errorf("found %+v second; want the schema as listed", found[1].Table)
	}
}

// A group serves the table of every schema its pattern selects, whatever
// the schema's name: each relay claims through quoted names and is woken
// by its table's NOTIFY on a channel holding the name (the relays never
// poll here).
func TestGroupServesAnySchemaName(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	names := []string{"sp ace", `q"x`, "ü", "a/b", `x"; drop table y; --`}
	for _, n := range names {
		f.add(t, n, true)
	}
	g := f.newGroup(t, newGroupPublisher(0, 0), f.groupConfig(true))
	stop := testkit.Run(t, g.Run)
	f.waitServing(t, g, names...)
	for _, n := range names {
		s := f.tables[n]
		w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: s.Table()})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			e, err := txoutbox.NewEvent("orders", "order", "k", "order.changed", i)
			if err != nil {
				t.Fatal(err)
			}
			testkit.Commit(t, context.Background(), s.SQL, w, e)
		}
	}
	testkit.WaitFor(t, 15*time.Second, "every table's rows published through NOTIFY", func() bool {
		for _, n := range names {
			if f.count(t, n, "state = 'published'") != 2 {
				return false
			}
		}
		return true
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
