package walrelay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay"
)

// runErr starts r and returns the channel Run's error comes on; the test's
// end stops it.
func runErr(t *testing.T, r *Relay) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done, returned := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(returned)
		done <- r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-returned:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30s of cancel")
		}
	})
	return done
}

// runActiveErr is runErr, returning once r streams.
func runActiveErr(t *testing.T, r *Relay) <-chan error {
	t.Helper()
	done := runErr(t, r)
	testkit.WaitFor(t, 20*time.Second, "the relay streams", r.Active)
	return done
}

// wantRunError waits up to within for Run (runErr's done) to return an
// error matching want.
func wantRunError(t *testing.T, done <-chan error, want error, within time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, want) {
			t.Fatalf("Run: %v, want %v", err, want)
		}
	case <-time.After(within):
		t.Fatalf("Run did not stop with %v within %s", want, within)
	}
}

// writeTableLess commits table-less events (WriterConfig.WALMessages) of
// aggs in one transaction.
func (b *bundle) writeTableLess(t *testing.T, aggs ...string) []txoutbox.Event {
	t.Helper()
	wal, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: b.db.Table(), WALMessages: true})
	if err != nil {
		t.Fatal(err)
	}
	return b.writeWith(t, wal, true, aggs...)
}

// writeWith writes events of aggs with w in one transaction, committed or
// rolled back.
func (b *bundle) writeWith(t *testing.T, w *txoutbox.Writer, commit bool, aggs ...string) []txoutbox.Event {
	t.Helper()
	ctx := context.Background()
	tx := b.begin(t)
	defer tx.Rollback()
	events := b.events(t, aggs...)
	if err := w.Write(ctx, tx, events...); err != nil {
		t.Fatal(err)
	}
	if commit {
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	return events
}

// lockTable holds an ACCESS EXCLUSIVE lock on the outbox table until the
// returned function (or the test's end) releases it.
func (b *bundle) lockTable(t *testing.T) (release func()) {
	t.Helper()
	ctx := context.Background()
	lock := b.begin(t)
	t.Cleanup(func() { _ = lock.Rollback() })
	if _, err := lock.ExecContext(ctx, `LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	return func() { _ = lock.Rollback() }
}

// lost reports which of events are neither published by p nor left in the
// table: events lost.
func (b *bundle) lost(t *testing.T, p *recorder, events []txoutbox.Event) []string {
	t.Helper()
	var out []string
	for _, e := range events {
		if slices.Contains(p.ids(), e.ID.String()) {
			continue
		}
		if b.count(t, `SELECT count(*) FROM outbox WHERE event_id = $1`, e.ID) == 0 {
			out = append(out, e.ID.String())
		}
	}
	return out
}

// rawEvents inserts n rows around the Writer, naming only the columns
// without a default, so they go in whatever the table's other columns.
func (b *bundle) rawEvents(t *testing.T, n int) []txoutbox.Event {
	t.Helper()
	events := b.events(t, make([]string, n)...)
	for i := range events {
		events[i].AggregateID = "raw"
		b.exec(t, `INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, headers) VALUES ($1, 'orders', 'raw', 'x', '\x7b7d', '{}')`, events[i].ID)
	}
	return events
}

// The core invariant: a DBA who changes the publication while the relay
// streams never makes it delete a row it did not publish. The relay
// refuses to go on with the fix in its error, and once the publication is
// right again the next relay publishes the rows written meanwhile.
func TestChangedPublicationDeletesNothingUnpublished(t *testing.T) {
	t.Parallel()
	for name, alter := range map[string]func(b *bundle, pub string){
		"drop table": func(b *bundle, pub string) {
			b.exec(t, `ALTER PUBLICATION `+pub+` DROP TABLE `+b.db.Table().String())
		},
		"publish update, delete": func(b *bundle, pub string) {
			b.exec(t, `ALTER PUBLICATION `+pub+` SET (publish = 'update, delete')`)
		},
		"row filter": func(b *bundle, pub string) {
			b.exec(t, `ALTER PUBLICATION `+pub+` SET TABLE `+b.db.Table().String()+` WHERE (aggregate_id <> 'raw')`)
		},
		"drop column cascade": func(b *bundle, pub string) {
			b.exec(t, `ALTER TABLE `+b.db.Table().String()+` DROP COLUMN content_type CASCADE`)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			cfg := b.config()
			r := b.newRelay(t, cfg)
			done := runActiveErr(t, r)
			first := b.write(t, "a", "b")
			b.pub.waitFor(t, first...)
			testkit.WaitFor(t, 20*time.Second, "the cleanup emptied the table", func() bool {
				return b.count(t, `SELECT count(*) FROM outbox`) == 0
			})
			alter(b, r.Publication())
			written := b.rawEvents(t, 5)
			select {
			case err := <-done:
				if !errors.Is(err, ErrPublication) {
					t.Fatalf("Run: %v, want ErrPublication", err)
				}
				t.Logf("refused: %v", err)
			case <-time.After(10 * time.Second):
				t.Error("the relay went on streaming through the changed publication")
			}
			time.Sleep(3 * cfg.CleanupInterval) // about time: no cleanup round after the refusal deletes them
			if lost := b.lost(t, b.pub, written); len(lost) > 0 {
				t.Fatalf("%d of %d events neither published nor in the table: %v", len(lost), len(written), lost)
			}
		})
	}
}

// A table dropped from the publication and added back while the relay
// streamed: the rows written in between were never streamed, and the slot
// went past them. The relay notices (the publication's fingerprint moved),
// and the next one publishes them rather than deleting them.
func TestPublicationChangedAndRestoredRepublishesTheGap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.CleanupInterval = time.Hour // the change is found at the start of the next session
	r := b.newRelay(t, cfg)
	stop := runActive(t, r)
	b.pub.waitFor(t, b.write(t, "a")...)
	table := b.db.Table().String()
	b.exec(t, `ALTER PUBLICATION `+r.Publication()+` DROP TABLE `+table)
	gap := b.rawEvents(t, 3)
	b.exec(t, `ALTER PUBLICATION `+r.Publication()+` ADD TABLE `+table)
	b.waitConfirmed(t, r) // keepalives move the slot past the gap
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	p := newRecorder()
	cfg.Publisher, cfg.CleanupInterval = p, 100*time.Millisecond
	runActive(t, b.newRelay(t, cfg))
	p.waitFor(t, gap...)
}

// A publication and slot made by hand, with rows in the table: the relay
// did not make the slot, so it publishes the rows (it used to take the
// slot as set up and delete them as confirmed).
func TestSlotMadeByHandPublishesTheTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.write(t, "a", "b", "c")
	b.slotByHand(t)
	b.startRelay(t)
	b.pub.waitFor(t, old...)
	later := b.write(t, "a")
	b.pub.waitFor(t, later...)
	testkit.WaitFor(t, 20*time.Second, "the cleanup emptied the table", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox WHERE state = 'pending'`) == 0
	})
}

// A DBA answers a lost or broken slot by making it again: the rows the old
// slot had not confirmed are published by the next relay, not deleted as
// confirmed by the new slot.
func TestSlotMadeAgainByHandPublishesWhatTheOldOneHadNot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	stop := runActive(t, b.newRelay(t, cfg))
	b.pub.waitFor(t, b.write(t, "a")...)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	unconfirmed := b.write(t, "a", "b")
	slot := b.defaultName()
	testkit.WaitFor(t, 10*time.Second, "the walsender gone", func() bool {
		return b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active`, slot) == 0
	})
	b.exec(t, `SELECT pg_drop_replication_slot($1)`, slot)
	b.exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
	p := newRecorder()
	cfg.Publisher = p
	runActive(t, b.newRelay(t, cfg))
	p.waitFor(t, unconfirmed...)
	ids := p.ids()
	if slices.Index(ids, unconfirmed[0].ID.String()) < 0 {
		t.Fatalf("published %v", ids)
	}
}

// A dropped publication leaves a slot that cannot stream: the relay stops
// with the fix instead of retrying forever; `outbox wal takeover --force`
// drops the slot keeping every unpublished row, and the next relay
// publishes them.
func TestDroppedPublicationIsRecoverable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	r := b.newRelay(t, cfg)
	done := runActiveErr(t, r)
	b.pub.waitFor(t, b.write(t, "a")...)
	b.exec(t, `DROP PUBLICATION `+r.Publication())
	written := b.write(t, "a", "b")
	wantRunError(t, done, ErrPublication, 15*time.Second)
	tcfg := TakeoverConfig{Table: cfg.Table}
	if _, err := Takeover(context.Background(), cfg.ConnString, tcfg); !errors.Is(err, ErrPublication) {
		t.Fatalf("Takeover without Force: %v, want ErrPublication", err)
	}
	tcfg.Force = true
	res, err := Takeover(context.Background(), cfg.ConnString, tcfg)
	if err != nil {
		t.Fatalf("Takeover with Force: %v", err)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox WHERE state = 'pending'`); res.Unconfirmed != n || n < len(written) {
		t.Errorf("takeover left %d rows pending (reported %d), want at least the %d written", n, res.Unconfirmed, len(written))
	}
	p := newRecorder()
	cfg.Publisher = p
	runActive(t, b.newRelay(t, cfg))
	p.waitFor(t, written...)
}

// A relay that stopped while it set the slot up leaves the slot; the
// table-less events committed since the slot was made exist only in its
// WAL, so the next relay streams from it instead of dropping it.
func TestHalfMadeSlotKeepsItsTableLessEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.write(t, "k")
	slot, pub := b.slotByHand(t)
	b.exec(t, `COMMENT ON PUBLICATION `+pub+` IS 'txoutbox: initialising slot `+slot+`'`)
	tableLess := b.writeTableLess(t, "m", "n")
	b.startRelay(t)
	b.pub.waitFor(t, append(old, tableLess...)...)
}

// An event the broker refuses whose row is gone by the time it is to be
// marked dead (written and deleted in one transaction) is dropped with a
// log; the aggregate's later events and the slot go on.
func TestDeadEventWithoutItsRowDoesNotStall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.MaxAttempts = 2
	r := b.newRelay(t, cfg)
	runActive(t, r)
	bad := b.events(t, "k")
	b.pub.failEvent(bad[0].ID.String(), relay.Permanent(errors.New("topic refused")))
	ctx := context.Background()
	tx := b.begin(t)
	defer tx.Rollback()
	b.writeIn(t, tx, bad...)
	if _, err := tx.ExecContext(ctx, `DELETE FROM outbox WHERE event_id = $1`, bad[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	b.pub.waitFor(t, b.write(t, "k")...)
}

// A relay that stops with a publish in progress keeps the slot until its
// lanes have stopped: a standby cannot stream, and publish, the same
// events while the old relay's publish still goes out.
func TestStoppingRelayHoldsTheSlotUntilItsLanesStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.SenderTimeout = 4 * time.Second // the stop's drain gives up after 2s; the server frees the slot 4s after the last status update
	gaveUp := countLogs(&cfg, drainGaveUp)
	r := b.newRelay(t, cfg)
	stop := runActive(t, r)
	_, holding, release := b.commitHeld(t, "h")
	waitClosed(t, holding, "the held event's publish")
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	testkit.WaitFor(t, 20*time.Second, "the stop's drain to give up", func() bool { return gaveUp.Load() > 0 })
	time.Sleep(500 * time.Millisecond) // about time: a walsender let go would exit meanwhile
	active := b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active`, r.Slot())
	release()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if active != 1 {
		t.Fatal("the slot was free for a standby while the stopping relay's publish was still in flight")
	}
}

// One transaction of many events goes to the lanes as it arrives, held to
// MaxInFlight (and one part) like any others, instead of whole at its
// commit; all of it is published and the slot confirmed past it.
func TestLargeTransactionIsStreamedInBoundedMemory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.MaxInFlight = 100
	r := b.newRelay(t, cfg)
	// The most events the relay held read and unconfirmed at any publish.
	var most atomic.Int64
	b.pub.OnPublish(func(string, *message.Message) {
		n := r.inflight.Load()
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(100 * time.Microsecond) // about time: a broker slower than the stream
	})
	runActive(t, r)
	aggs := make([]string, 3000)
	for i := range aggs {
		aggs[i] = fmt.Sprint("a", i%40)
	}
	events := b.write(t, aggs...)
	end := b.walLSN(t)
	b.pub.waitFor(t, events...)
	testkit.WaitFor(t, 20*time.Second, "the slot confirmed past the transaction", func() bool {
		return b.confirmedPast(t, r.Slot(), end)
	})
	if limit := int64(cfg.MaxInFlight + cfg.MaxInFlight/2); most.Load() > limit {
		t.Fatalf("held %d events of the transaction at once, want at most %d", most.Load(), limit)
	}
	t.Logf("held at most %d events", most.Load())
}

// Relays of two schemas' tables of one name, each named without its schema
// (found on the search_path), get default names of their own: each
// streams its own table, neither stands by for the other's slot.
func TestDefaultNamesAreKeyedByTheSchema(t *testing.T) {
	t.Parallel()
	var relays []*Relay
	var bundles []*bundle
	for range 2 {
		b := setup(t)
		cfg := b.config()
		cfg.Table = txoutbox.Table{}
		r := b.newRelay(t, cfg)
		run(t, r)
		relays, bundles = append(relays, r), append(bundles, b)
	}
	for i, r := range relays {
		testkit.WaitFor(t, 20*time.Second, "both relays stream", r.Active)
		if want := bundles[i].defaultName(); r.Slot() != want || r.Publication() != want {
			t.Errorf("relay %d: slot %s, publication %s; want %s", i, r.Slot(), r.Publication(), want)
		}
	}
	for _, b := range bundles {
		b.pub.waitFor(t, b.write(t, "a")...)
	}
}

// A WAL relay does not make a slot while polling relays run on the table
// (a standby forgotten after a takeover, a switch without stopping them):
// both modes would publish every event. Once they are gone it does.
func TestNoSlotWhilePollingRelaysRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `INSERT INTO outbox_relays (id, host) VALUES ('poller', 'host')`)
	pending := b.write(t, "a")
	done := runErr(t, b.newRelay(t, b.config()))
	wantRunError(t, done, ErrPollingRelays, 10*time.Second)
	if n := b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, b.defaultName()); n != 0 {
		t.Fatal("a slot was made")
	}
	if len(b.pub.ids()) != 0 {
		t.Fatalf("published %v beside the polling relay", b.pub.ids())
	}
	b.exec(t, `DELETE FROM outbox_relays`)
	b.startRelay(t)
	b.pub.waitFor(t, pending...)
}

// countingHandler counts the records logged with a message, whatever
// the level its Handler passes on.
type countingHandler struct {
	slog.Handler
	msg string
	n   *atomic.Int64
}

func (countingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.Handler = h.Handler.WithAttrs(as)
	return h
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	h.Handler = h.Handler.WithGroup(name)
	return h
}

func (h countingHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Message == h.msg {
		h.n.Add(1)
	}
	if !h.Handler.Enabled(ctx, rec.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, rec)
}

// countLogs has the relays of cfg count the records they log with message
// msg.
func countLogs(cfg *relayConfig, msg string) *atomic.Int64 {
	n := new(atomic.Int64)
	cfg.Logger = slog.New(countingHandler{Handler: cfg.Logger.Handler(), msg: msg, n: n})
	return n
}

// drainGaveUp is what a stopping relay logs when its drain gives up on
// the events still in flight.
const drainGaveUp = "stopping with events in flight; they are published again by the next relay"

// releaseOnceLogged calls release once n counts a record, or after 20s:
// a held publish let go once the relay logged what the test waits for.
func releaseOnceLogged(n *atomic.Int64, release func()) {
	go func() {
		testkit.Eventually(20*time.Second, func() bool { return n.Load() > 0 })
		release()
	}()
}

// A restart whose setup reads are slow (here the table locked for longer
// than SenderTimeout) does them before it starts streaming, so the server,
// which waits for no answer yet, does not drop the connection meanwhile.
func TestSlowSetupDoesNotLoseTheStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	b.setUpSlot(t, cfg)
	var interrupted atomic.Int64
	cfg.Logger = slog.New(countingHandler{Handler: cfg.Logger.Handler(), msg: "WAL stream interrupted; reconnecting", n: &interrupted})
	unlock := b.lockTable(t)
	r := b.newRelay(t, cfg)
	run(t, r)
	testkit.WaitFor(t, 20*time.Second, "the relay's setup to wait for the table", func() bool {
		return b.count(t, `SELECT count(*) FROM pg_locks WHERE relation = 'outbox'::regclass AND NOT granted`) > 0
	})
	time.Sleep(cfg.SenderTimeout + time.Second) // about time: the setup reads wait past SenderTimeout
	unlock()
	testkit.WaitFor(t, 20*time.Second, "the relay streams", r.Active)
	b.pub.waitFor(t, b.write(t, "a")...)
	if n := interrupted.Load(); n != 0 {
		t.Fatalf("the stream was interrupted %d times while the relay set up", n)
	}
}

// A row that cannot be decoded is marked dead by the lanes: a slow mark
// (here a trigger that sleeps past SenderTimeout) does not hold up the
// stream, which goes on answering the server and publishing.
func TestSlowDeadMarkDoesNotHoldTheStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	var interrupted atomic.Int64
	cfg.Logger = slog.New(countingHandler{Handler: cfg.Logger.Handler(), msg: "WAL stream interrupted; reconnecting", n: &interrupted})
	runActive(t, b.newRelay(t, cfg))
	b.exec(t, `CREATE FUNCTION slow_dead() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.state = 'dead' THEN PERFORM pg_sleep(3); END IF; RETURN NEW; END $$`)
	b.exec(t, `CREATE TRIGGER slow_dead BEFORE UPDATE ON outbox FOR EACH ROW EXECUTE FUNCTION slow_dead()`)
	b.exec(t, `INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, headers)
		VALUES (gen_random_uuid(), 'orders', 'k', 'x', '\x7b7d', '{"n": 1}')`)
	b.pub.waitFor(t, b.write(t, "other")...)
	testkit.WaitFor(t, 20*time.Second, "the undecodable row dead", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox WHERE state = 'dead'`) == 1
	})
	if n := interrupted.Load(); n != 0 {
		t.Fatalf("the stream was interrupted %d times while a row was marked dead", n)
	}
}

// On a slot it did not make, the relay publishes the table's unpublished
// rows, and the stream, which carries the ones written after the slot was
// made, skips them as published: each goes out once.
func TestTakenOverSlotPublishesEachRowOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.slotByHand(t)
	rows := b.write(t, "a", "b", "c")
	b.startRelay(t)
	later := b.write(t, "a")
	b.pub.waitFor(t, append(rows, later...)...)
	for _, e := range append(rows, later...) {
		n := 0
		for _, id := range b.pub.ids() {
			if id == e.ID.String() {
				n++
			}
		}
		if n != 1 {
			t.Errorf("event %s published %d times, want once", e.ID, n)
		}
	}
}

// A marker reads back as written; anything else is no marker.
func TestMarkerRoundTrip(t *testing.T) {
	t.Parallel()
	for _, m := range []marker{
		{slot: "s1", ceiling: 0x16B374D48, fingerprint: "1/false/2:3//abc"},
		{slot: "s1", ceiling: 0x16B374D48, fingerprint: "1/false/2:3//abc", settled: 42},
		{slot: "s1", ceiling: 1, fingerprint: "x", settled: -1},
		{initialising: true, slot: "s1"},
	} {
		if got := parseMarker(m.String()); got != m {
			t.Errorf("parseMarker(%q) = %+v, want %+v", m.String(), got, m)
		}
	}
	for _, s := range []string{"", "owned by the payments team", "txoutbox: slot s1 up to nowhere publication x", "txoutbox: slot s1",
		"txoutbox: slot s1 up to 0/1 publication x settled", "txoutbox: slot s1 up to 0/1 publication x settled -3", "txoutbox: slot s1 up to 0/1 publication x kept 3"} {
		if got := parseMarker(s); got != (marker{}) {
			t.Errorf("parseMarker(%q) = %+v, want no marker", s, got)
		}
	}
}

// A relay that loses its connection resumes without reading the table's
// highest settled row again (a walk past every unsettled row above it,
// seconds on a backlog of millions): here the table is locked while it
// reconnects, and it streams again all the same.
func TestReconnectDoesNotWalkTheTableAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, _ := b.startRelay(t)
	b.pub.waitFor(t, b.write(t, "a")...)
	b.lockTable(t)
	b.exec(t, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1`, r.Slot())
	testkit.WaitFor(t, 10*time.Second, "the relay reconnects", func() bool { return !r.Active() })
	testkit.WaitFor(t, 5*time.Second, "the relay streams again while the table is locked", r.Active)
}

// markerOf reads the publication's marker.
func (b *bundle) markerOf(t *testing.T) marker {
	t.Helper()
	var s string
	if err := b.db.SQL.QueryRow(`SELECT coalesce(obj_description(oid, 'pg_publication'), '') FROM pg_publication WHERE pubname = $1`,
		b.defaultName()).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return parseMarker(s)
}

// A relay that resumes its own slot takes the highest settled row from the
// marker and the dead rows' index, never walking the backlog for the
// highest published row: a row marked published behind the marker's back
// (by hand here) is not seen. A marker without a settled row makes it walk
// once, and the cleanup's marks raise the marker's settled row.
func TestResumeReadsTheSettledRowFromTheMarker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.Retention = time.Hour // rows are marked published, not deleted
	r := b.newRelay(t, cfg)
	stop := runActive(t, r)
	if m := b.markerOf(t); m.settled != 0 {
		t.Fatalf("marker %+v: a slot the relay made starts with settled row 0", m)
	}
	events := b.write(t, "a", "b", "c")
	b.pub.waitFor(t, events...)
	testkit.WaitFor(t, 20*time.Second, "the cleanup's marks reach the marker", func() bool {
		return b.markerOf(t).settled >= 3
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	b.write(t, "d", "e", "f", "g")
	b.exec(t, `UPDATE outbox SET state = 'dead' WHERE id = 5`)
	b.exec(t, `UPDATE outbox SET state = 'published' WHERE id = 7`)
	ctx := context.Background()
	r2 := b.newRelay(t, cfg)
	pool, err := r2.openPool(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := r2.resolveNames(ctx, pool); err != nil {
		t.Fatal(err)
	}
	settled := b.markerOf(t).settled
	rs, err := r2.resumeFrom(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if want := max(settled, 5); rs.settledMax != want {
		t.Fatalf("settledMax %d, want %d: the marker's %d or the highest dead row 5, not the walk's 7", rs.settledMax, want, settled)
	}

	m := b.markerOf(t)
	m.settled = -1
	b.exec(t, `COMMENT ON PUBLICATION `+b.defaultName()+` IS '`+m.String()+`'`)
	r3 := b.newRelay(t, cfg)
	if err := r3.resolveNames(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if rs, err = r3.resumeFrom(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if rs.settledMax != 7 {
		t.Fatalf("settledMax %d without a settled row in the marker, want the walk's 7", rs.settledMax)
	}
}

// After setting up a slot it did not make, the relay's marker bounds the
// settled rows by the table's highest row: that slot's stream may bring
// any row the table holds, published by the setup or before it.
func TestSetupOfAFoundSlotSettlesUpToTheHighestRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.slotByHand(t)
	events := b.write(t, "a", "b", "c")
	b.startRelay(t)
	b.pub.waitFor(t, events...)
	if m := b.markerOf(t); m.settled != 3 {
		t.Fatalf("marker %+v, want settled row 3", m)
	}
}

// A WAL relay does not make a slot while events scheduled for later wait
// in the table: it would publish them at once. Once their time has come
// it does, and from then on the database refuses new ones.
func TestNoSlotWhileScheduledEventsWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := b.events(t, "a")
	ev[0].NotBefore = time.Now().Add(time.Hour)
	b.commit(t, ev...)
	done := runErr(t, b.newRelay(t, b.config()))
	wantRunError(t, done, ErrScheduled, 10*time.Second)
	if n := b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, b.defaultName()); n != 0 {
		t.Fatal("a slot was made")
	}
	if len(b.pub.ids()) != 0 {
		t.Fatal("the scheduled event was published")
	}
	b.exec(t, `UPDATE outbox SET not_before = now() - interval '1 second', retry_at = now() - interval '1 second'`)
	b.startRelay(t)
	testkit.WaitFor(t, 10*time.Second, "the event, due now, is published", func() bool { return len(b.pub.ids()) == 1 })
	late := b.events(t, "a")
	late[0].NotBefore = time.Now().Add(time.Hour)
	tx, err := b.db.SQL.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := b.w.Write(context.Background(), tx, late...); !errors.Is(err, txoutbox.ErrNotBeforeStreamed) {
		t.Fatalf("a scheduled event on the streamed table: %v, want txoutbox.ErrNotBeforeStreamed", err)
	}
}
