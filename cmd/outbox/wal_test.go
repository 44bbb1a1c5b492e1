package main

import (
	"cmp"
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/walrelay"
)

// `outbox relay --mode wal` streams the outbox, `outbox status` shows its
// slot, and `outbox wal takeover` hands the outbox back to the polling
// relay.
func TestWALModeRelayStatusAndTakeover(t *testing.T) {
	testkit.RequireLogical(t)
	t.Parallel()
	e := newOps(t)
	slot := outboxsql.WALName(e.db.Database(), e.db.Schema, "")
	t.Cleanup(func() { dropWALSlot(t, e.db, slot) })
	before, _ := e.write(t, "orders", "o-1", "order.placed")
	b := startOutbox(t, nil, append([]string{"relay", "--mode", "wal", "--dev-broker", "--cleanup-interval", "100ms", "--metrics-addr", "127.0.0.1:0"}, e.flags...)...)
	b.waitOutput(t, "from slot "+slot)
	b.waitOutput(t, "serving /metrics")
	base := "http://" + servingAddr.FindStringSubmatch(b.stderr.String())[1]
	waitFor(t, 20*time.Second, "the earlier row published", func() bool { s, _ := e.state(t, before); return s == "published" })
	after, _ := e.write(t, "orders", "o-1", "order.shipped")
	waitFor(t, 20*time.Second, "the streamed row cleaned up", func() bool { s, _ := e.state(t, after); return s == "gone" })

	waitFor(t, 10*time.Second, "the slot's metrics", func() bool {
		_, body := get(t, base+"/metrics")
		return strings.Contains(body, `txoutbox_wal_slot_active{`) && strings.Contains(body, `txoutbox_wal_slot_lag_bytes{`) &&
			strings.Contains(body, `txoutbox_wal_status="reserved"`) && strings.Contains(body, "txoutbox_wal_published_total")
	})
	if code, body := get(t, base+"/readyz"); code != 200 || !strings.Contains(body, `"streaming":true`) {
		t.Errorf("/readyz: %d %s", code, body)
	}

	var st statusOutput
	e.runJSON(t, &st, "status")
	if st.WALSlot == nil || st.WALSlot.Name != slot || !st.WALSlot.Active || st.WALSlot.WALStatus == "" || st.WALSlot.LagBytes < 0 {
		t.Fatalf("status wal_slot = %+v", st.WALSlot)
	}
	if code, out, _ := e.run(t, "status"); code != 0 || !strings.Contains(out, "wal slot "+slot+": active") {
		t.Errorf("status: exit %d:\n%s", code, out)
	}
	if code, _, errOut := e.run(t, "wal", "takeover"); code == 0 || !strings.Contains(errOut, "stop the WAL relays first") {
		t.Errorf("takeover with the relay running: exit %d, %q", code, errOut)
	}
	if code, _, errOut := e.run(t, "replay", "--since", "1h"); code == 0 || !strings.Contains(errOut, "run `outbox wal takeover` first") {
		t.Errorf("replay with the relay streaming: exit %d, %q", code, errOut)
	}
	if code := b.stop(t); code != 0 {
		t.Fatalf("relay exit %d; stderr:\n%s", code, b.stderr)
	}
	code, out, errOut := e.run(t, "wal", "takeover")
	if code != 0 || !strings.Contains(out, "slot "+slot+" dropped") {
		t.Fatalf("takeover: exit %d, %q %q", code, out, errOut)
	}
	if code, out, errOut := e.run(t, "replay", "--since", "1h"); code != 0 {
		t.Errorf("replay after takeover: exit %d, %q %q", code, out, errOut)
	}
	e.runJSON(t, &st, "status")
	if st.WALSlot != nil {
		t.Errorf("slot still reported after takeover: %+v", st.WALSlot)
	}
}

// Two services on one server, each with its own database and an outbox
// of one schema and table name, each with `outbox relay --mode wal`: each
// relay streams a slot of its own, named on its start line, and `outbox
// wal takeover --force` pointed at one database never drops the other's
// slot, streamed or not; the other's relay goes on from its slot and
// publishes what was written meanwhile.
func TestWALRelaysOfTwoDatabasesKeepToTheirOwnSlots(t *testing.T) {
	testkit.RequireLogical(t)
	t.Parallel()
	a := newOps(t)
	s := testkit.NewSchema(t, testkit.NewDatabase(t), a.db.Schema, true)
	b := &opsEnv{db: &testkit.DB{SQL: s.SQL, URL: s.URL, Schema: s.Name}, flags: []string{"--database-url", s.URL, "--schema", s.Name},
		writer: testkit.NewWriter(t, s.Table())}
	slotA := outboxsql.WALName(a.db.Database(), a.db.Schema, "")
	slotB := outboxsql.WALName(b.db.Database(), b.db.Schema, "")
	t.Cleanup(func() { dropWALSlot(t, a.db, slotA) }) // slotB goes with its database
	relayArgs := []string{"relay", "--mode", "wal", "--dev-broker", "--cleanup-interval", "100ms", "--standby-retry", "100ms"}
	ra := startOutbox(t, nil, append(append(relayArgs, "--id", "a"), a.flags...)...)
	ra.waitOutput(t, "from slot "+slotA)
	ra.waitOutput(t, "relay a streaming")
	rb := startOutbox(t, nil, append(append(relayArgs, "--id", "b"), b.flags...)...)
	rb.waitOutput(t, "from slot "+slotB)
	rb.waitOutput(t, "relay b streaming")
	published := func(e *opsEnv, id int64) func() bool {
		return func() bool { st, _ := e.state(t, id); return st == "published" || st == "gone" }
	}
	for _, e := range []*opsEnv{a, b} {
		id, _ := e.write(t, "orders", "o-1", "order.placed")
		waitFor(t, 20*time.Second, "the event of "+e.db.Database()+" published", published(e, id))
	}

	slotOfA := func() (exists, active bool) {
		err := a.db.SQL.QueryRow(`SELECT active FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, slotA).Scan(&active)
		return err == nil, active
	}
	if code, _, errOut := b.run(t, "wal", "takeover", "--force", "--slot", slotA); code == 0 || !strings.Contains(errOut, "belongs to another database") {
		t.Errorf("takeover --force of the other database's streamed slot: exit %d, %q", code, errOut)
	}
	if code := ra.stop(t); code != 0 {
		t.Fatalf("relay a: exit %d; stderr:\n%s", code, ra.stderr)
	}
	waitFor(t, 10*time.Second, "relay a's walsender gone", func() bool { exists, active := slotOfA(); return exists && !active })
	meanwhile, _ := a.write(t, "orders", "o-1", "order.shipped")
	if code, _, errOut := b.run(t, "wal", "takeover", "--force", "--slot", slotA); code == 0 || !strings.Contains(errOut, "belongs to another database") {
		t.Errorf("takeover --force of the other database's idle slot: exit %d, %q", code, errOut)
	}
	if code := rb.stop(t); code != 0 {
		t.Fatalf("relay b: exit %d; stderr:\n%s", code, rb.stderr)
	}
	if code, out, errOut := b.run(t, "wal", "takeover", "--force"); code != 0 || !strings.Contains(out, "slot "+slotB+" dropped") {
		t.Errorf("takeover --force of its own slot: exit %d, %q %q", code, out, errOut)
	}
	if exists, _ := slotOfA(); !exists {
		t.Fatalf("slot %s of database %s is gone", slotA, a.db.Database())
	}
	ra = startOutbox(t, nil, append(append(relayArgs, "--id", "a2"), a.flags...)...)
	ra.waitOutput(t, "relay a2 streaming")
	waitFor(t, 20*time.Second, "the event written while relay a was stopped published", published(a, meanwhile))
}

// dropWALSlot drops slot, of db's database, and the publication of its
// name, once its walsender is gone: a slot left behind holds the shared
// server's WAL forever.
func dropWALSlot(t *testing.T, db *testkit.DB, slot string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	testkit.Eventually(20*time.Second, func() bool { // an error while the slot is active: its walsender is exiting
		_, err := db.SQL.ExecContext(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE slot_name = $1 AND database = current_database()`, slot)
		return err == nil || ctx.Err() != nil
	})
	_, _ = db.SQL.ExecContext(ctx, `DROP PUBLICATION IF EXISTS `+slot)
}

func TestWALModeUsageErrors(t *testing.T) {
	t.Parallel()
	wantUsageErrors(t, outbox, []usageCase{
		{[]string{"relay", "--mode", "tail", "--database-url", "postgres://x/y"}, `--mode "tail"`},
		{[]string{"relay", "--mode", "wal", "--database-url", "postgres://x/y", "--slot", "Bad-Name"}, "--slot"},
		{[]string{"relay", "--mode", "wal", "--database-url", "postgres://x/y", "--sender-timeout", "100ms"}, "--sender-timeout 100ms is below its floor 1s"},
		{[]string{"wal"}, "want a subcommand"},
		{[]string{"wal", "rewind"}, "unknown subcommand"},
	})
}

// A WAL relay started with --slot names its slot otherwise than its
// publication: retry and replay find it when given the same --slot.
func TestRetryAndReplayTakeTheRelaysSlot(t *testing.T) {
	testkit.RequireLogical(t)
	t.Parallel()
	e := newOps(t)
	slot := "custom_" + e.db.Schema
	if _, err := e.db.SQL.Exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.db.SQL.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
	})
	if code, _, errOut := e.run(t, "replay", "--since", "1h", "--slot", slot); code == 0 || !strings.Contains(errOut, "run `outbox wal takeover` first") {
		t.Errorf("replay --slot %s: exit %d, %q", slot, code, errOut)
	}
	if code, _, errOut := e.run(t, "dead", "retry", "--all", "--slot", slot); code == 0 || !strings.Contains(errOut, "run `outbox wal takeover` first") {
		t.Errorf("dead retry --slot %s: exit %d, %q", slot, code, errOut)
	}
	if code, out, errOut := e.run(t, "replay", "--since", "1h"); code != 0 {
		t.Errorf("replay without the slot: exit %d, %q %q", code, out, errOut)
	}
}

// A WAL relay whose slot and publication are named otherwise (--slot and
// --publication) marks its publication with its slot's name: retry and
// replay find the slot through the table even when the operator omits
// --slot.
func TestRetryAndReplayFindTheRelaysSlotThroughTheTable(t *testing.T) {
	testkit.RequireLogical(t)
	t.Parallel()
	e := newOps(t)
	slot, pub := "custom_"+e.db.Schema, "custompub_"+e.db.Schema
	if _, err := e.db.SQL.Exec(`CREATE PUBLICATION ` + pub + ` FOR TABLE ` + e.db.Table().String() + ` WITH (publish = 'insert')`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.SQL.Exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.db.SQL.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		_, _ = e.db.SQL.Exec(`DROP PUBLICATION IF EXISTS ` + pub)
	})
	if code, _, errOut := e.run(t, "replay", "--since", "1h"); code != 0 {
		t.Fatalf("replay with no relay's slot: exit %d, %q", code, errOut)
	}
	if _, err := e.db.SQL.Exec(`COMMENT ON PUBLICATION ` + pub + ` IS 'txoutbox: slot ` + slot + ` up to 0/1 publication 1/false/2:3//4'`); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := e.run(t, "replay", "--since", "1h"); code == 0 || !strings.Contains(errOut, "run `outbox wal takeover` first") {
		t.Errorf("replay without --slot: exit %d, %q", code, errOut)
	}
	if code, _, errOut := e.run(t, "dead", "retry", "--all"); code == 0 || !strings.Contains(errOut, "run `outbox wal takeover` first") {
		t.Errorf("dead retry without --slot: exit %d, %q", code, errOut)
	}
}

// --sender-timeout under 4s brings the ping interval down to a quarter of
// it, which the WAL relay requires.
func TestWALSenderTimeoutSetsThePingInterval(t *testing.T) {
	testkit.RequireLogical(t)
	t.Parallel()
	for _, st := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 10 * time.Second} {
		var w walFlags
		fs := flag.NewFlagSet("relay", flag.ContinueOnError)
		w.register(fs)
		if err := fs.Parse([]string{"--sender-timeout", st.String()}); err != nil {
			t.Fatal(err)
		}
		cfg, err := w.config(fs, relay.Config{}, "postgres://x/y")
		if err != nil {
			t.Errorf("--sender-timeout %s: %v", st, err)
			continue
		}
		if ping := cmp.Or(cfg.PingInterval, walrelay.PingIntervalDefault); ping*4 > st {
			t.Errorf("--sender-timeout %s: ping interval %s", st, ping)
		}
	}
}

// A polling relay does not start on a table a WAL relay's slot streams:
// the outbox is handed over with `outbox wal takeover` first.
func TestPollingRelayRefusesATableTheWALRelayStreams(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	slot := outboxsql.WALName(e.db.Database(), e.db.Schema, "")
	if _, err := e.db.SQL.Exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.db.SQL.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stdout, stderr strings.Builder
	code := run(ctx, testProcess(nil, &stdout, &stderr), append([]string{"relay", "--dev-broker"}, e.flags...))
	if code == 0 || !strings.Contains(stderr.String(), "outbox wal takeover") {
		t.Fatalf("relay: exit %d, stderr %q; want a refusal naming the takeover", code, stderr.String())
	}
}

// `outbox status` finds the WAL relay's slot through the table, whatever
// its name: here one named in a relay's marker on a publication of it.
func TestStatusFindsTheRelaysSlotThroughTheTable(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	slot, pub := "stat_"+e.db.Schema, "statpub_"+e.db.Schema
	for _, q := range []string{
		`CREATE PUBLICATION ` + pub + ` FOR TABLE ` + e.db.Table().String() + ` WITH (publish = 'insert')`,
		`COMMENT ON PUBLICATION ` + pub + ` IS 'txoutbox: slot ` + slot + ` up to 0/1 publication x'`,
		`SELECT pg_create_logical_replication_slot('` + slot + `', 'pgoutput')`,
	} {
		if _, err := e.db.SQL.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = e.db.SQL.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		_, _ = e.db.SQL.Exec(`DROP PUBLICATION IF EXISTS ` + pub)
	})
	if code, out, errOut := e.run(t, "status"); code != 0 || !strings.Contains(out, "wal slot "+slot+":") {
		t.Fatalf("status: exit %d, %q %q; want the slot %s", code, out, errOut, slot)
	}
}
