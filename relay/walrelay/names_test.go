package walrelay

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// inOtherDatabase is an outbox in a database of the test's own on the
// same server, in a schema of the same name as b's: the outbox of another
// service that names its schema and table alike. The database, and every
// slot in it, is dropped when the test ends.
func (b *bundle) inOtherDatabase(t *testing.T) *bundle {
	t.Helper()
	return bundleOf(t, testkit.NewSchema(t, testkit.NewDatabase(t), b.db.Schema, true))
}

// bundleOf is a bundle of the outbox migrated into s.
func bundleOf(t *testing.T, s *testkit.Schema) *bundle {
	t.Helper()
	db := &testkit.DB{SQL: s.SQL, URL: s.URL, Schema: s.Name}
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: db.Table(), DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{db: db, w: w, pub: newRecorder()}
}

// A table in a schema of any name PostgreSQL allows streams under the
// default names, which hold only a slot name's characters whatever the
// schema's; names set by hand work too.
func TestDefaultNamesOfASchemaOfAnyName(t *testing.T) {
	t.Parallel()
	table := txoutbox.Table{Schema: `tenant_q"x; drop table y; --`}
	for _, cfg := range []Config{{Table: table}, {Table: table, Publication: "txoutbox_tenant_qx", Slot: "txoutbox_tenant_qx"}} {
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
	}
	base := setup(t)
	b := bundleOf(t, testkit.NewSchema(t, base.db.URL, `tenant "q" x; `+base.db.Schema[len(base.db.Schema)-8:], true))
	t.Cleanup(func() { b.dropSlot(t) })
	r, _ := b.startRelay(t)
	if want := b.defaultName(); r.Slot() != want || r.Publication() != want || validSlotName(want) != nil {
		t.Fatalf("slot %s, publication %s; want %s, a slot name", r.Slot(), r.Publication(), want)
	}
	b.pub.waitFor(t, b.write(t, "k")...)
}

// slotOf reads slot: whether it exists, its database and whether a
// walsender holds it.
func (b *bundle) slotOf(t *testing.T, slot string) (exists bool, database string, active bool) {
	t.Helper()
	err := b.db.SQL.QueryRowContext(context.Background(), `SELECT database, active FROM pg_replication_slots WHERE slot_name = $1`, slot).
		Scan(&database, &active)
	return err == nil, database, active
}

// Two services on one server, each with its own database and an outbox
// of one schema and table name, each with a WAL relay of the default
// names: each gets a slot of its own, and neither stands by for the other.
func TestDefaultNamesAreKeyedByTheDatabase(t *testing.T) {
	t.Parallel()
	a := setup(t)
	b := a.inOtherDatabase(t)
	ra, _ := a.startRelay(t)
	rb := b.newRelay(t, b.config())
	run(t, rb)
	testkit.WaitFor(t, 20*time.Second, "the other database's relay streams", rb.Active)
	if ra.Slot() == rb.Slot() {
		t.Fatalf("both relays stream slot %s", ra.Slot())
	}
	for _, x := range []struct {
		bu *bundle
		r  *Relay
	}{{a, ra}, {b, rb}} {
		if want := x.bu.defaultName(); x.r.Slot() != want || x.r.Publication() != want {
			t.Errorf("slot %s, publication %s; want %s", x.r.Slot(), x.r.Publication(), want)
		}
		if _, database, _ := a.slotOf(t, x.r.Slot()); database != x.bu.db.Database() {
			t.Errorf("slot %s is database %q's, want %q's", x.r.Slot(), database, x.bu.db.Database())
		}
		x.bu.pub.waitFor(t, x.bu.write(t, "k")...)
	}
}

// A slot of an earlier version's default name ("txoutbox_<schema>_<table>")
// is kept by an upgraded relay of the default names in its database, which
// goes on from it: the events written while no relay ran are published,
// and no other slot is made. The other database, whose schema and table
// are named alike, never takes it: its Takeover does not drop it, and its
// relay makes a slot of its own.
func TestDefaultNamesKeepAnEarlierVersionsSlotOfTheirDatabaseOnly(t *testing.T) {
	t.Parallel()
	a := setup(t)
	old := outboxsql.WALLegacyName(a.db.Schema, "")
	t.Cleanup(func() { a.dropSlotNamed(t, old) })
	// The earlier version's relay: its default names were these.
	earlier := a.config()
	earlier.Slot, earlier.Publication = old, old
	stop := runActive(t, a.newRelay(t, earlier))
	a.pub.waitFor(t, a.write(t, "k")...)
	a.waitConfirmedSlot(t, old)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	meanwhile := a.write(t, "k", "j")

	// The other database's operator, as the refusal below used to advise:
	// its takeover, forced, finds no slot of its own and drops none.
	b := a.inOtherDatabase(t)
	if _, err := Takeover(context.Background(), b.db.URL, TakeoverConfig{Table: b.db.Table(), Force: true}); err == nil {
		t.Fatal("Takeover in the other database, which has no slot, succeeded")
	}
	if exists, _, _ := a.slotOf(t, old); !exists {
		t.Fatalf("slot %s is gone", old)
	}
	rb := b.newRelay(t, b.config())
	run(t, rb)
	testkit.WaitFor(t, 20*time.Second, "the other database's relay streams", rb.Active)
	if rb.Slot() == old {
		t.Fatalf("the other database's relay took slot %s", old)
	}
	b.pub.waitFor(t, b.write(t, "k")...)

	var kept atomic.Int64
	cfg := a.config()
	cfg.Logger = slog.New(countingHandler{Handler: slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}), n: &kept,
		msg: "kept the slot of an earlier version's default name, which exists in this database; the default now is another"})
	upgraded := newRecorder()
	cfg.Publisher = upgraded
	r := a.newRelay(t, cfg)
	runActive(t, r)
	if r.Slot() != old || r.Publication() != old {
		t.Fatalf("slot %s, publication %s; want the earlier %s", r.Slot(), r.Publication(), old)
	}
	upgraded.waitFor(t, meanwhile...)
	if n := len(upgraded.ids()); n != len(meanwhile) {
		t.Errorf("published %d events, want the %d written while no relay ran", n, len(meanwhile))
	}
	if kept.Load() != 1 {
		t.Errorf("logged %d times that it kept the slot, want once", kept.Load())
	}
	if exists, _, _ := a.slotOf(t, a.defaultName()); exists {
		t.Errorf("slot %s was made beside the kept one", a.defaultName())
	}
	if _, database, _ := a.slotOf(t, old); database != a.db.Database() {
		t.Errorf("slot %s is database %q's", old, database)
	}
}

// A table given without its schema had the default names "txoutbox_<table>"
// before they were keyed by the schema: a relay keeps a slot of that name
// in its database, with its publication.
func TestDefaultNamesKeepTheUnqualifiedNamesOfARelayFromBefore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A table name of this test's own: the old names are not per schema.
	name := "legacy_" + b.db.Schema[len(b.db.Schema)-8:]
	b.exec(t, `ALTER TABLE outbox RENAME TO `+name)
	old := outboxsql.WALLegacyName("", name)
	b.exec(t, `CREATE PUBLICATION `+old+` FOR TABLE `+name+` WITH (publish = 'insert')`)
	b.exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, old)
	t.Cleanup(func() { b.dropSlotNamed(t, old) })
	cfg := b.config()
	cfg.Table = txoutbox.Table{Name: name}
	r := b.newRelay(t, cfg)
	pool, err := r.openPool(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := r.resolveNames(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	if r.Slot() != old || r.Publication() != old {
		t.Fatalf("slot %s, publication %s; want the old %s", r.Slot(), r.Publication(), old)
	}
}

// A relay given the name of another database's slot refuses it, whether
// that database's relay streams from it or not, and Takeover, forced,
// neither drops nor touches it: it streams the other database's outbox.
func TestSlotOfAnotherDatabaseIsNeverUsedNorDropped(t *testing.T) {
	t.Parallel()
	a := setup(t)
	b := a.inOtherDatabase(t)
	rb, stopB := b.startRelay(t)
	theirs := rb.Slot()
	cfg := a.config()
	cfg.Slot = theirs
	wantRunError(t, runErr(t, a.newRelay(t, cfg)), ErrSlotOtherDatabase, 10*time.Second)
	ctx := context.Background()
	tc := TakeoverConfig{Table: a.db.Table(), Slot: theirs, Force: true}
	if _, err := Takeover(ctx, a.db.URL, tc); !errors.Is(err, ErrSlotOtherDatabase) {
		t.Fatalf("Takeover of the streamed slot: %v, want ErrSlotOtherDatabase", err)
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	written := b.write(t, "k")
	if _, err := Takeover(ctx, a.db.URL, tc); !errors.Is(err, ErrSlotOtherDatabase) {
		t.Fatalf("Takeover of the idle slot: %v, want ErrSlotOtherDatabase", err)
	}
	if exists, database, _ := a.slotOf(t, theirs); !exists || database != b.db.Database() {
		t.Fatalf("slot %s: exists %v, database %q; want it left to %q", theirs, exists, database, b.db.Database())
	}
	b.pub = newRecorder()
	b.startRelay(t)
	b.pub.waitFor(t, written...)
}

// Two schemas' outboxes in one database whose names read alike once made
// lower-case or joined with "_" (schema "<p>_x" with the table "outbox"
// and schema "<p>" with the table "x_outbox"; schemas "<p>_Up" and
// "<p>_up") get default names of their own: every relay streams its own
// table through its own publication and slot.
func TestDefaultNamesOfTwoSchemasOfOneDatabaseDiffer(t *testing.T) {
	t.Parallel()
	base := setup(t)
	p := base.db.Schema
	type outbox struct {
		b     *bundle
		table txoutbox.Table
	}
	var outboxes []outbox
	for _, table := range []txoutbox.Table{{Schema: p + "_x"}, {Schema: p, Name: "x_outbox"}, {Schema: p + "_Up"}, {Schema: p + "_up"}} {
		var s *testkit.Schema
		if table.Schema == p {
			s = &testkit.Schema{SQL: base.db.SQL, URL: base.db.URL, Name: p}
			m, err := migrations.New(base.db.SQL, migrations.Config{Table: table})
			if err == nil {
				_, err = m.Up(context.Background())
			}
			if err != nil {
				t.Fatal(err)
			}
		} else {
			s = testkit.NewSchema(t, base.db.URL, table.Schema, true)
		}
		b := bundleOf(t, s)
		w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: table, DisableNotify: true})
		if err != nil {
			t.Fatal(err)
		}
		b.w = w
		t.Cleanup(func() { b.dropSlotNamed(t, SlotDefault(base.db.Database(), table)) })
		outboxes = append(outboxes, outbox{b, table})
	}
	var relays []*Relay
	for _, o := range outboxes {
		cfg := o.b.config()
		cfg.Table = o.table
		r := o.b.newRelay(t, cfg)
		run(t, r)
		relays = append(relays, r)
	}
	seen := map[string]bool{}
	for i, r := range relays {
		testkit.WaitFor(t, 20*time.Second, "every relay streams", r.Active)
		if seen[r.Slot()] || seen[r.Publication()] {
			t.Errorf("relay of %s: slot %s, publication %s, taken by another table", outboxes[i].table, r.Slot(), r.Publication())
		}
		seen[r.Slot()], seen[r.Publication()] = true, true
	}
	for _, o := range outboxes {
		o.b.pub.waitFor(t, o.b.write(t, "k")...)
	}
}

// slotsOf returns those of names that are slots of b's database.
func (b *bundle) slotsOf(t *testing.T, names ...string) []string {
	t.Helper()
	var out []string
	for _, n := range names {
		if exists, database, _ := b.slotOf(t, n); exists && database == b.db.Database() {
			out = append(out, n)
		}
	}
	return out
}

// A relay of the default names that kept an earlier version's slot and
// stands by finds it dropped (an operator's Takeover) and a relay of the
// new default name streaming from the new slot: it never makes the earlier
// version's slot again, which would stream the table beside the new one,
// but stands by behind the new slot under the new name, and takes it over
// when that relay stops. Every event is published by one relay.
func TestAnUpgradedStandbyNeverMakesAnEarlierVersionsSlot(t *testing.T) {
	t.Parallel()
	a := setup(t)
	old, keyed := outboxsql.WALLegacyName(a.db.Schema, ""), a.defaultName()
	t.Cleanup(func() { a.dropSlotNamed(t, old); a.dropSlot(t) })
	earlier := a.config()
	earlier.Slot, earlier.Publication = old, old
	stopEarlier := runActive(t, a.newRelay(t, earlier))
	a.pub.waitFor(t, a.write(t, "k")...)
	a.waitConfirmedSlot(t, old)

	// The upgraded standby keeps the earlier slot, held by the earlier
	// relay. Its retry outlasts the takeover below, which must find the
	// slot idle.
	var standing atomic.Int64
	cfg := a.config()
	cfg.StandbyRetry = 5 * time.Second
	cfg.Logger = slog.New(countingHandler{Handler: slog.NewTextHandler(io.Discard, nil), n: &standing,
		msg: "standing by: the slot is held by another relay"})
	standby := newRecorder()
	cfg.Publisher = standby
	ra := a.newRelay(t, cfg)
	stopA := run(t, ra)
	testkit.WaitFor(t, 20*time.Second, "the upgraded relay stands by", func() bool { return standing.Load() > 0 })
	if ra.Slot() != old {
		t.Fatalf("the upgraded relay resolved slot %s, want the earlier %s", ra.Slot(), old)
	}
	if err := stopEarlier(); err != nil {
		t.Fatal(err)
	}
	if res, err := Takeover(context.Background(), a.db.URL, TakeoverConfig{Table: a.db.Table()}); err != nil || res.Slot != old {
		t.Fatalf("Takeover: dropped %q, %v; want %s dropped", res.Slot, err, old)
	}

	streaming := newRecorder()
	cfgB := a.config()
	cfgB.Publisher = streaming
	rb := a.newRelay(t, cfgB)
	stopB := runActive(t, rb)
	if rb.Slot() != keyed {
		t.Fatalf("the new relay streams slot %s, want %s", rb.Slot(), keyed)
	}
	testkit.WaitFor(t, 20*time.Second, "the standby's next session", func() bool {
		return ra.Slot() != old || len(a.slotsOf(t, old)) > 0
	})
	if slots := a.slotsOf(t, old, keyed); len(slots) != 1 || slots[0] != keyed {
		t.Fatalf("the table's slots are %v, want only %s", slots, keyed)
	}
	if ra.Slot() != keyed || ra.Publication() != keyed {
		t.Fatalf("the standby's slot %s, publication %s; want %s", ra.Slot(), ra.Publication(), keyed)
	}
	ev := a.write(t, "x")
	streaming.waitFor(t, ev...)
	if ra.Active() || len(standby.ids()) != 0 {
		t.Fatalf("the standby streams (active %v) and published %v beside the new relay", ra.Active(), standby.ids())
	}

	// The standby takes the new slot over once its relay stops.
	a.waitConfirmedSlot(t, keyed)
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the standby streams", ra.Active)
	next := a.write(t, "y")
	standby.waitFor(t, next...)
	if got := standby.ids(); len(got) != 1 || got[0] != next[0].ID.String() {
		t.Errorf("the standby published %v, want only %s", got, next[0].ID)
	}
	if got := streaming.ids(); len(got) != 1 || got[0] != ev[0].ID.String() {
		t.Errorf("the new relay published %v, want only %s", got, ev[0].ID)
	}
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
}

// The earlier version's slot a relay kept, dropped between its session
// finding it and its setup creating the slot, is not made again: the
// setup gives up, for the next session to resolve the names afresh.
func TestASetupNeverMakesAnEarlierVersionsSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := outboxsql.WALLegacyName(b.db.Schema, "")
	b.exec(t, `CREATE PUBLICATION `+old+` FOR TABLE `+b.db.Table().String()+` WITH (publish = 'insert')`)
	b.exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, old)
	t.Cleanup(func() { b.dropSlotNamed(t, old) })
	ctx := context.Background()
	r := b.newRelay(t, b.config())
	pool, err := r.openPool(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	srv, err := r.prepare(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if r.Slot() != old {
		t.Fatalf("slot %s, want the earlier %s", r.Slot(), old)
	}
	fp, err := r.preparePublication(ctx, pool, srv)
	if err != nil {
		t.Fatal(err)
	}
	b.exec(t, `SELECT pg_drop_replication_slot($1)`, old) // an operator's Takeover, as the session looked
	repl, err := r.connectReplication(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer repl.Close(ctx) //nolint:errcheck // the test's connection
	ls := newLanes(ctx, r.cfg.Lanes, r.laneDeps(pool))
	defer ls.stop()
	if err := newSetup(r.setupDeps(pool, repl, ls), fp).run(ctx); !errors.Is(err, errLegacySlotGone) {
		t.Fatalf("setup: %v, want errLegacySlotGone", err)
	}
	if slots := b.slotsOf(t, old, b.defaultName()); len(slots) != 0 {
		t.Fatalf("the setup made slots %v", slots)
	}
}
