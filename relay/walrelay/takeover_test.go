package walrelay

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin"
	"github.com/txoutbox/txoutbox/relay"
)

// Takeover marks published exactly what the slot confirmed, leaves the
// rest pending and drops the slot; the polling relay then publishes the
// rest, and nothing the WAL relay confirmed goes out again.
func TestTakeoverHandsTheRestToThePollingRelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cfg := b.config()
	cfg.SenderTimeout = time.Second
	cfg.CleanupInterval = time.Hour // confirmed rows stay pending: takeover must tell them apart
	cfg.Lanes = 1                   // "held" blocks everything after it
	gaveUp := countLogs(&cfg, drainGaveUp)
	w := b.newRelay(t, cfg)
	stop := runActive(t, w)
	var confirmed []txoutbox.Event
	for range 5 {
		confirmed = append(confirmed, b.write(t, "a", "b")...)
	}
	b.pub.waitFor(t, confirmed...)
	b.waitConfirmed(t, w)
	held, holding, release := b.commitHeld(t, "h")
	rest := b.write(t, "a", "c")
	waitClosed(t, holding, "the held event's publish")
	releaseOnceLogged(gaveUp, release) // once the stop's drain gave up on it
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	tc := TakeoverConfig{Table: b.db.Table()}
	res, err := Takeover(ctx, b.db.URL, tc)
	if err != nil {
		t.Fatal(err)
	}
	if res.Confirmed != int64(len(confirmed)) || res.Unconfirmed != 3 || res.Lost {
		t.Fatalf("takeover %+v, want %d confirmed and 3 unconfirmed", res, len(confirmed))
	}
	if n := b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, w.cfg.Slot); n != 0 {
		t.Fatal("slot still exists")
	}
	if _, err := Takeover(ctx, b.db.URL, tc); err == nil {
		t.Fatal("a second takeover found a slot")
	}

	polled := newRecorder()
	r, err := relay.New(b.db.SQL, polled, relay.Config{Table: b.db.Table(), PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(pctx) }()
	polled.waitFor(t, append(held, rest...)...)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, e := range confirmed {
		if slices.Contains(polled.ids(), e.ID.String()) {
			t.Errorf("confirmed event %s published again by the polling relay", e.ID)
		}
	}
}

// Takeover refuses while a relay streams from the slot.
func TestTakeoverRefusesAnActiveSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startRelay(t)
	_, err := Takeover(context.Background(), b.db.URL, TakeoverConfig{Table: b.db.Table()})
	if !errors.Is(err, ErrSlotActive) {
		t.Fatalf("Takeover: %v, want ErrSlotActive", err)
	}
}

// A slot whose relay stops while Takeover starts is taken over: the
// walsender releases it a moment after the relay's connection closes, and
// Takeover waits for that rather than refusing.
func TestTakeoverWaitsForAStoppingRelaysSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, stop := b.startRelay(t)
	app := "takeover_" + b.db.Schema // the takeover's connection, to tell its statements
	stopped := make(chan error, 1)
	go func() {
		// Once the takeover has read the slot, active.
		testkit.Eventually(20*time.Second, func() bool {
			var n int
			err := b.db.SQL.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query = $2`,
				app, outboxsql.WALSlot).Scan(&n)
			return err == nil && n > 0
		})
		stopped <- stop()
	}()
	if _, err := Takeover(context.Background(), b.db.URL+"&application_name="+app, TakeoverConfig{Table: b.db.Table()}); err != nil {
		t.Fatalf("Takeover while the relay stops: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// A relay that died while it initialised the slot leaves the
// publication's mark, and the rows written before the slot unpublished:
// the slot never streams them. Takeover must leave them pending for the
// polling relay, not mark them published as if the slot confirmed them.
func TestTakeoverAfterInterruptedInitialisationKeepsTheBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	old := b.write(t, "k", "l")
	slot, pub := b.slotByHand(t)
	b.exec(t, `COMMENT ON PUBLICATION `+pub+` IS 'txoutbox: initialising slot `+slot+`'`)

	res, err := Takeover(ctx, b.db.URL, TakeoverConfig{Table: b.db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox WHERE state = 'pending'`); n != len(old) {
		t.Fatalf("takeover %+v left %d rows pending, want the %d rows the slot never streamed", res, n, len(old))
	}
}

// A writer may commit asynchronously (synchronous_commit = off): its
// commit is visible, and releases its lock, before its WAL is flushed, and
// the slot decodes only flushed WAL. Takeover must still see such a row
// as unconfirmed, not mark it published unsent.
func TestTakeoverSeesAsynchronousCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	slot, pub := b.defaultName(), b.defaultName()
	b.exec(t, `CREATE PUBLICATION `+pub+` FOR TABLE `+b.db.Table().String()+` WITH (publish = 'insert')`)
	for i := range 5 {
		b.exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
		tx := b.begin(t)
		if _, err := tx.ExecContext(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			t.Fatal(err)
		}
		ev := b.events(t, "k")
		b.writeIn(t, tx, ev...)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		res, err := Takeover(ctx, b.db.URL, TakeoverConfig{Table: b.db.Table()})
		if err != nil {
			t.Fatal(err)
		}
		if n := b.count(t, `SELECT count(*) FROM outbox WHERE state = 'pending' AND event_id = $1`, ev[0].ID); n != 1 {
			t.Fatalf("round %d: takeover %+v marked the asynchronously committed row published; the slot never streamed it", i, res)
		}
	}
}

// Takeover reads only the ids of the rows the slot has not confirmed: a
// row the relay could not turn into an event (headers that are no string
// map; the relay marks such a row dead), or a session whose settings would
// format values differently, does not stop it.
func TestTakeoverReadsOnlyTheRowIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.slotByHand(t)
	b.exec(t, `INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, headers)
		VALUES (gen_random_uuid(), 'orders', 'k', 'x', '\x7b7d', '{"n": 1}')`)
	b.write(t, "k")
	sep := "?"
	if strings.Contains(b.db.URL, "?") {
		sep = "&"
	}
	res, err := Takeover(ctx, b.db.URL+sep+"bytea_output=escape&DateStyle=SQL,DMY", TakeoverConfig{Table: b.db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Unconfirmed != 2 || res.Confirmed != 0 || b.count(t, `SELECT count(*) FROM outbox WHERE state = 'pending'`) != 2 {
		t.Fatalf("takeover %+v; want both rows left pending", res)
	}
}

// An operator's retry of a dead event is refused while the WAL relay
// streams, and while its slot waits for takeover: the stream never
// carries the row's return to pending, so the relay would not publish it,
// and its cleanup or the takeover would take it for published. After the
// takeover the retry works and the row stays pending for the polling
// relay.
func TestRetryWaitsForTheTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cfg := b.config()
	cfg.MaxAttempts = 1
	stop := runActive(t, b.newRelay(t, cfg))
	bad := b.commitFailing(t, "k", relay.Permanent(errors.New("refused")))
	testkit.WaitFor(t, 10*time.Second, "the refused event dead", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox WHERE state = 'dead'`) == 1
	})
	adm, err := outboxadmin.New(b.db.SQL, outboxadmin.Config{Table: b.db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Retry(ctx, outboxadmin.Filter{All: true}, false); !errors.Is(err, outboxadmin.ErrWALStreamed) {
		t.Fatalf("retry while the relay streams: %v, want ErrWALStreamed", err)
	}
	b.pub.waitFor(t, b.write(t, "other")...)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Retry(ctx, outboxadmin.Filter{All: true}, false); !errors.Is(err, outboxadmin.ErrWALStreamed) {
		t.Fatalf("retry before the takeover: %v, want ErrWALStreamed", err)
	}
	if _, err := Takeover(ctx, b.db.URL, TakeoverConfig{Table: b.db.Table()}); err != nil {
		t.Fatal(err)
	}
	if retried, err := adm.Retry(ctx, outboxadmin.Filter{All: true}, false); err != nil || len(retried) != 1 {
		t.Fatalf("retry after the takeover: %v, %v", retried, err)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox WHERE event_id = $1 AND state = 'pending'`, bad[0].ID); n != 1 {
		t.Fatalf("the retried event is not pending (%d rows)", n)
	}
}

// A relay creates its slot under the WAL gate that retries and replays
// hold (outboxsql.OpsWALGate): an operator's retry in progress when the
// relay starts commits before the slot's snapshot, and the retried row
// goes out with the backlog, instead of falling between the snapshot and
// the stream.
func TestSlotCreationWaitsForARetryInProgress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	dead := b.write(t, "k")
	b.exec(t, `UPDATE outbox SET state = 'dead', last_error = 'refused'`)
	names, err := outboxsql.NamesFor(b.db.Table().Schema, b.db.Table().Name)
	if err != nil {
		t.Fatal(err)
	}
	tx := b.begin(t)
	defer tx.Rollback() //nolint:errcheck // committed below
	// The gate is keyed by the table's OID: the relay names the table with
	// its schema, this the search_path's way.
	if _, err := tx.ExecContext(ctx, outboxsql.OpsWALGate, "outbox"); err != nil {
		t.Fatal(err)
	}
	r := b.newRelay(t, b.config())
	run(t, r)
	testkit.WaitFor(t, 20*time.Second, "the relay waiting for the WAL gate to set the slot up", func() bool {
		return b.count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objsubid = 2
			AND classid::bigint = hashtext('txoutbox.wal.gate')::bigint & 4294967295
			AND objid::bigint = ($1::regclass::oid::bigint - 2147483648) & 4294967295`, b.db.Table().String()) == 1 ||
			b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, r.cfg.Slot) == 1
	})
	time.Sleep(200 * time.Millisecond) // about time: the relay keeps waiting while the gate is held
	if n := b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, r.cfg.Slot); n != 0 {
		t.Fatal("the slot was created while a retry held the WAL gate")
	}
	if _, err := tx.ExecContext(ctx, names.Render(outboxsql.OpsRetry), outboxsql.Int64Array([]int64{1})); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	b.pub.waitFor(t, dead...)
}
