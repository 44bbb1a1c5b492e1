package walrelay

import (
	"context"
	"errors"
	"fmt"
	"github.com/ThreeDotsLabs/watermill/message"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/relaytest"
)

// The WAL relay sends the polling relay's message: same UUID, payload, key
// (aggregate id) and metadata.
func TestPublishesThePollingRelaysMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startRelay(t)
	events := b.write(t, "a", "b")
	b.pub.waitFor(t, events...)
	for _, e := range events {
		// The writer stored CreatedAt at microsecond precision.
		e.CreatedAt = e.CreatedAt.Truncate(time.Microsecond)
		want := relay.Message(e)
		got := b.pub.message(e.ID.String())
		if string(got.Payload) != string(want.Payload) {
			t.Errorf("payload %q, want %q", got.Payload, want.Payload)
		}
		for k, v := range want.Metadata {
			if got.Metadata.Get(k) != v {
				t.Errorf("metadata %s = %q, want %q", k, got.Metadata.Get(k), v)
			}
		}
		if len(got.Metadata) != len(want.Metadata) {
			t.Errorf("metadata %v, want %v", got.Metadata, want.Metadata)
		}
	}
}

// Both modes send the same message for the same event, CloudEvents
// headers included: the WAL relay streams the events, then, its slot
// gone and the rows pending again, the polling relay publishes them, and
// the two publishers saw the same topics, keys, ids, payloads and
// metadata.
func TestBothModesSendTheSameMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wal := relaytest.NewPublisher()
	cfg := b.config()
	cfg.Publisher = wal
	cfg.Retention = -1 // keep the rows, marked published, for the polling relay
	cfg.CloudEvents = relay.CloudEventsConfig{Enabled: true}
	stop := runActive(t, b.newRelay(t, cfg))
	events := b.write(t, "a", "b", "c")
	testkit.WaitFor(t, 20*time.Second, "the WAL relay publishes 3 events", func() bool { return len(wal.Messages()) == 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	b.dropSlot(t)
	b.exec(t, `UPDATE `+b.db.Table().String()+` SET state = 'pending', attempts = 0, next_attempt_at = now(), retry_at = '-infinity', published_at = NULL`)

	poll := relaytest.NewPublisher()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := relaytest.Drain(ctx, b.db.SQL, poll, relay.Config{Table: b.db.Table(), CloudEvents: relay.CloudEventsConfig{Enabled: true}}); err != nil {
		t.Fatal(err)
	}
	byID := func(p *relaytest.Publisher) map[string]relaytest.Published {
		out := map[string]relaytest.Published{}
		for _, m := range p.Messages() {
			out[m.UUID] = m
		}
		return out
	}
	fromWAL, fromPoll := byID(wal), byID(poll)
	for _, e := range events {
		w, p := fromWAL[e.ID.String()], fromPoll[e.ID.String()]
		if w.Message == nil || p.Message == nil {
			t.Fatalf("event %s: WAL relay sent %v, polling relay %v", e.ID, w.Message != nil, p.Message != nil)
		}
		if w.Topic != p.Topic || w.Key != p.Key || string(w.Payload) != string(p.Payload) {
			t.Errorf("event %s: WAL relay sent topic %q key %q payload %q; polling relay %q %q %q", e.ID, w.Topic, w.Key, w.Payload, p.Topic, p.Key, p.Payload)
		}
		if !maps.Equal(w.Metadata, p.Metadata) {
			t.Errorf("event %s: WAL relay's metadata %v, polling relay's %v", e.ID, w.Metadata, p.Metadata)
		}
		if w.Metadata.Get("ce_id") != e.ID.String() || w.Metadata.Get("tenant") != "t1" {
			t.Errorf("event %s: metadata %v lacks its CloudEvents or own headers", e.ID, w.Metadata)
		}
	}
}

// On PostgreSQL 15 and later the publication the relay creates carries
// only the columns an event is built from. A publication of every column,
// as relays created before, streams the same events
// (TestInterruptedInitialisationStartsOver runs on one).
func TestPublicationListsOnlyTheEventColumns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, _ := b.startRelay(t)
	b.pub.waitFor(t, b.write(t, "a")...)
	ctx := context.Background()
	var version int
	if err := b.db.SQL.QueryRowContext(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < columnListVersion {
		return // no column lists before 15: the event went through a publication of every column
	}
	var cols string
	if err := b.db.SQL.QueryRowContext(ctx, `SELECT array_to_string(attnames, ', ') FROM pg_publication_tables WHERE pubname = $1`,
		r.cfg.Publication).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if cols != outboxsql.WALColumns {
		t.Errorf("published columns %q, want %q", cols, outboxsql.WALColumns)
	}
}

// Two transactions write one aggregate without locking anything: A inserts
// first (the lower id) but commits after B. The WAL relay publishes in
// commit order, B before A, which the polling relay (id order) cannot.
func TestCommitOrderWithoutRowLocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startRelay(t)
	for round := range 5 {
		txA := b.begin(t)
		a := b.events(t, "agg")
		b.writeIn(t, txA, a...)
		bEv := b.write(t, "agg") // B: inserted later, committed first
		if err := txA.Commit(); err != nil {
			t.Fatal(err)
		}
		b.pub.waitFor(t, a[0], bEv[0])
		ids := b.pub.ids()
		ia, ib := slices.Index(ids, a[0].ID.String()), slices.Index(ids, bEv[0].ID.String())
		if ib > ia {
			t.Fatalf("round %d: A (committed second) published at %d before B (committed first) at %d", round, ia, ib)
		}
	}
}

// The confirmed position does not pass a transaction whose event the
// broker has not acknowledged, however many later transactions are
// published, nor while keepalives arrive; it passes it once it is.
func TestConfirmedStopsAtTheFirstUnacknowledgedTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, _ := b.startRelay(t)
	first := b.write(t, "warmup")
	b.pub.waitFor(t, first...)
	held, _, release := b.commitHeld(t, "held")
	heldEnd := b.walLSN(t)
	var later []txoutbox.Event
	for range 20 {
		later = append(later, b.write(t, "other")...)
	}
	b.pub.waitFor(t, later...)
	b.waitStatusUpdates(t, r.cfg.Slot, 3) // keepalives come and go
	if b.confirmedPast(t, r.cfg.Slot, heldEnd) {
		t.Fatalf("slot confirmed at %s, past the held transaction (ends before %s)", b.confirmedLSN(t), heldEnd)
	}
	release()
	b.pub.waitFor(t, held...)
	testkit.WaitFor(t, 10*time.Second, "slot confirmed past the released transaction", func() bool {
		return b.confirmedPast(t, r.cfg.Slot, heldEnd)
	})
}

// A relay that stops with an event unacknowledged leaves the slot before
// it; the next relay publishes it and everything after, each at least
// once, and only what the first had not confirmed twice.
func TestRestartResumesFromTheConfirmedPosition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.SenderTimeout = time.Second // the stop's drain gives up after 0.5s
	gaveUp := countLogs(&cfg, drainGaveUp)
	r1 := b.newRelay(t, cfg)
	stop1 := runActive(t, r1)
	before := b.write(t, "a", "b", "c")
	b.pub.waitFor(t, before...)
	b.waitConfirmed(t, r1)
	held, holding, release := b.commitHeld(t, "h")
	after := b.write(t, "x", "y")
	waitClosed(t, holding, "the held event's publish")
	releaseOnceLogged(gaveUp, release) // let the stuck lane end once the drain gave up on it
	if err := stop1(); err != nil {
		t.Fatal(err)
	}
	published := len(b.pub.ids())

	p2 := newRecorder()
	cfg.Publisher = p2
	run(t, b.newRelay(t, cfg))
	more := b.write(t, "z")
	p2.waitFor(t, append(held, more...)...)
	testkit.WaitFor(t, 10*time.Second, "x and y published by one relay or the other", func() bool {
		all := append(b.pub.ids(), p2.ids()...)
		return slices.Contains(all, after[0].ID.String()) && slices.Contains(all, after[1].ID.String())
	})
	for _, e := range before {
		if slices.Contains(p2.ids(), e.ID.String()) {
			t.Errorf("event %s, confirmed before the stop, published again", e.ID)
		}
	}
	t.Logf("first relay published %d, second %d", published, len(p2.ids()))
}

// One relay streams; another waits; when the first stops, the second takes
// over within a few StandbyRetry intervals.
func TestStandbyTakesOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r1 := b.newRelay(t, b.config())
	stop1 := runActive(t, r1)
	b.pub.waitFor(t, b.write(t, "a")...)
	cfg2 := b.config()
	standing := countLogs(&cfg2, "standing by: the slot is held by another relay")
	r2 := b.newRelay(t, cfg2)
	run(t, r2)
	testkit.WaitFor(t, 10*time.Second, "the second relay to find the slot held", func() bool { return standing.Load() > 0 })
	if !r1.Active() || r2.Active() {
		t.Fatalf("active: r1 %v r2 %v, want only r1", r1.Active(), r2.Active())
	}
	if err := stop1(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testkit.WaitFor(t, 10*time.Second, "the standby streams", r2.Active)
	t.Logf("standby took over after %s", time.Since(start))
	b.pub.waitFor(t, b.write(t, "b")...)
}

// Rows committed before the slot existed are published first, in id
// order, and marked published; the stream goes on after them.
func TestBacklogBeforeTheSlotIsPublished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.write(t, "k", "k", "j")
	run(t, b.newRelay(t, b.config()))
	b.pub.waitFor(t, old...)
	newer := b.write(t, "k")
	b.pub.waitFor(t, newer...)
	ids := b.pub.ids()
	if slices.Index(ids, old[0].ID.String()) > slices.Index(ids, old[1].ID.String()) ||
		slices.Index(ids, old[1].ID.String()) > slices.Index(ids, newer[0].ID.String()) {
		t.Fatalf("order of k's events: %v", ids)
	}
}

// A relay that died while it initialised the slot leaves the
// publication's mark; the next relay drops the slot and starts over, so
// the rows before it are published.
func TestInterruptedInitialisationStartsOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.write(t, "k")
	r := b.newRelay(t, b.config())
	slot, pub := b.slotByHand(t)
	b.exec(t, `COMMENT ON PUBLICATION `+pub+` IS 'txoutbox: initialising slot `+slot+`'`)
	run(t, r)
	b.pub.waitFor(t, old...)
	b.pub.waitFor(t, b.write(t, "k")...)
}

// Published rows leave the table by the batched cleanup; with a
// Retention they are marked published instead. The rows in the table
// before the slot (published at setup and marked so) go the same way.
func TestCleanup(t *testing.T) {
	t.Parallel()
	for _, retention := range []time.Duration{0, time.Hour} {
		t.Run(retention.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			cfg := b.config()
			cfg.Retention = retention
			cfg.CleanupBatch = 7
			events := b.write(t, "a", "b") // the backlog, before the slot
			runActive(t, b.newRelay(t, cfg))
			for range 10 {
				events = append(events, b.write(t, "a", "b", "c")...)
			}
			b.pub.waitFor(t, events...)
			testkit.WaitFor(t, 20*time.Second, "no unpublished rows", func() bool {
				return b.count(t, `SELECT count(*) FROM outbox WHERE state = 'pending'`) == 0
			})
			want := 0
			if retention > 0 {
				want = len(events)
			}
			testkit.WaitFor(t, 20*time.Second, fmt.Sprintf("%d published rows kept", want), func() bool {
				return b.count(t, `SELECT count(*) FROM outbox WHERE state = 'published'`) == want
			})
		})
	}
}

// An event the broker refuses for good is marked dead after MaxAttempts;
// the aggregate's later events go on.
func TestRefusedEventGoesDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.MaxAttempts = 3
	runActive(t, b.newRelay(t, cfg))
	b.commitFailing(t, "k", relay.Permanent(errors.New("too large")))
	b.pub.waitFor(t, b.write(t, "k")...)
	testkit.WaitFor(t, 10*time.Second, "the refused event dead", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox WHERE state = 'dead' AND attempts = 3 AND last_error LIKE '%too large%'`) == 1
	})
}

// A publish that fails for want of the broker, many times MaxAttempts,
// makes nothing dead: the event is retried until the broker is back, and
// its aggregate waits for it.
func TestOutageMakesNothingDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.MaxAttempts = 2
	runActive(t, b.newRelay(t, cfg))
	first := b.commitFailing(t, "k", errors.New("kafka: client has run out of available brokers to talk to"))
	later := b.write(t, "k")
	other := b.write(t, "o")
	b.pub.waitFor(t, other...)
	testkit.WaitFor(t, 10*time.Second, "the failed event retried past MaxAttempts", func() bool {
		return b.pub.failedTries(first[0].ID.String()) > 3*cfg.MaxAttempts
	})
	if n := b.count(t, `SELECT count(*) FROM outbox WHERE state = 'dead'`); n != 0 {
		t.Fatalf("%d events dead in an outage", n)
	}
	b.pub.Heal()
	b.pub.waitFor(t, append(first, later...)...)
	pos := map[string]int{}
	for i, id := range b.pub.ids() {
		pos[id] = i
	}
	if pos[first[0].ID.String()] > pos[later[0].ID.String()] {
		t.Fatal("the aggregate's later event was published before the one that failed")
	}
}

func TestServerChecks(t *testing.T) {
	t.Parallel()
	ok := serverFacts{VersionNum: 150004, WALLevel: "logical", Replication: true}
	if err := ok.check(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []serverFacts{
		{VersionNum: 130011, WALLevel: "logical", Replication: true},
		{VersionNum: 150004, WALLevel: "replica", Replication: true},
		{VersionNum: 150004, WALLevel: "logical", Replication: false},
	} {
		if err := f.check(); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%+v: %v, want ErrUnsupported", f, err)
		}
	}
	r := &Relay{cfg: Config{Slot: "s"}, database: "d"}
	if err := r.slot().usable(slotState{exists: true, walStatus: "lost", plugin: "pgoutput", here: true}); !errors.Is(err, ErrSlotLost) {
		t.Errorf("lost slot: %v, want ErrSlotLost", err)
	}
	if err := r.slot().usable(slotState{exists: true, walStatus: "reserved", plugin: "pgoutput", database: "e"}); !errors.Is(err, ErrSlotOtherDatabase) {
		t.Errorf("slot of another database: %v, want ErrSlotOtherDatabase", err)
	}
}

// A role without REPLICATION is refused at start, with the fix.
func TestRefusesARoleWithoutReplication(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	role := "norepl_" + b.db.Schema
	if _, err := b.db.SQL.ExecContext(ctx, `CREATE ROLE `+role+` LOGIN NOREPLICATION`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = b.db.SQL.ExecContext(context.Background(), `DROP ROLE `+role) })
	cfg := b.config()
	cfg.ConnString = b.db.URL + "&user=" + role
	err := b.newRelay(t, cfg).Run(ctx)
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Run: %v, want ErrUnsupported", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	const conn = "postgres://localhost/db"
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := New(conn, newRecorder(), Config{}); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]Config{
		"slot case": {Slot: "Bad"},
		"ping":      {PingInterval: 6 * time.Second},
		// Half of SenderTimeout: one late reply and a live relay gives the slot up.
		"ping half": {PingInterval: 5 * time.Second},
	} {
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
		if _, err := New(conn, newRecorder(), c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New: %v, want ErrInvalidConfig", name, err)
		}
	}
	// New's own arguments.
	for name, a := range map[string]struct {
		conn string
		pub  message.Publisher
	}{
		"no conn":      {"", newRecorder()},
		"bad conn":     {"postgres://localhost:port/db", newRecorder()},
		"no publisher": {conn, nil},
	} {
		if _, err := New(a.conn, a.pub, Config{}); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// Table-less events (WriterConfig.WALMessages) are published among the
// rows in commit order, as the same messages, and leave no row; rolled
// back ones are not published.
func TestTableLessEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startRelay(t)
	wal, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: b.db.Table(), WALMessages: true})
	if err != nil {
		t.Fatal(err)
	}
	write := func(w *txoutbox.Writer, commit bool, aggs ...string) []txoutbox.Event {
		return b.writeWith(t, w, commit, aggs...)
	}
	first := write(wal, true, "k", "k")
	rolledBack := write(wal, false, "k")
	row := write(b.w, true, "k")
	last := write(wal, true, "k")
	want := append(append(append([]txoutbox.Event{}, first...), row...), last...)
	b.pub.waitFor(t, want...)
	ids := b.pub.ids()
	for i, e := range want {
		if ids[i] != e.ID.String() {
			t.Fatalf("published %v, want %v in that order", ids, want)
		}
	}
	if slices.Contains(ids, rolledBack[0].ID.String()) {
		t.Fatal("rolled back table-less event published")
	}
	got, wantMsg := b.pub.message(first[0].ID.String()), relay.Message(first[0])
	for k, v := range wantMsg.Metadata {
		if k != txoutbox.HeaderCreatedAt && got.Metadata.Get(k) != v {
			t.Errorf("metadata %s = %q, want %q", k, got.Metadata.Get(k), v)
		}
	}
	if string(got.Payload) != string(first[0].Payload) {
		t.Errorf("payload %q", got.Payload)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox`); n > 1 {
		t.Fatalf("%d rows in the table, want at most the one row event", n)
	}
}

// A relay resuming from a slot whose position moved back (a crash of
// PostgreSQL loses the position confirmed since the last checkpoint) skips
// the rows the table holds as published or dead; a row it does not find
// (deleted, or not yet visible) is published.
func TestResumeSkipsRowsPublishedBefore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events := b.write(t, "a", "b", "c", "d")
	ctx := context.Background()
	b.exec(t, `UPDATE outbox SET state = 'published' WHERE id = 1`)
	b.exec(t, `UPDATE outbox SET state = 'dead' WHERE id = 2`)
	b.exec(t, `DELETE FROM outbox WHERE id = 3`)
	r := b.newRelay(t, b.config())
	pool, err := r.openPool(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tx := &txn{}
	for i, e := range events {
		tx.events = append(tx.events, event{row: int64(i + 1), e: e})
	}
	tx.events = append(tx.events, event{e: events[0]}) // table-less: kept
	if err := r.tableRows(pool).skipSettled(ctx, tx, tx.end, resume{until: tx.end, settledMax: 4}); err != nil {
		t.Fatal(err)
	}
	var kept []int64
	for _, ev := range tx.events {
		kept = append(kept, ev.row)
	}
	if !slices.Equal(kept, []int64{3, 4, 0}) {
		t.Fatalf("kept rows %v, want 3 (not found), 4 (pending) and the table-less event", kept)
	}
}

// Only a row of a transaction that ended before the session started, no
// higher than the highest settled row then, can be settled already; no
// other is looked up in the table.
func TestResumeLooksUpOnlyWhatCanBeSettled(t *testing.T) {
	rs := resume{until: 1000, settledMax: 50}
	for _, c := range []struct {
		end  uint64
		row  int64
		want bool
	}{
		{1000, 50, true},
		{10, 1, true},
		{1001, 50, false}, // ended after the session started
		{1000, 51, false}, // above every settled row
		{1000, 0, false},  // a table-less event
	} {
		if got := rs.mayBeSettled(c.end, c.row); got != c.want {
			t.Errorf("end %d, row %d: mayBeSettled %v, want %v", c.end, c.row, got, c.want)
		}
	}
}

// When the highest settled row cannot be read, a session looks up every
// transaction the slot sends again, as it did before the bound.
func TestResumeWithoutTheSettledBoundLooksUpEverything(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.Table.Name = "no_such_outbox"
	r := b.newRelay(t, cfg)
	ctx := context.Background()
	pool, err := r.openPool(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rs, err := r.resumeFrom(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if rs.until == 0 || !rs.mayBeSettled(rs.until, math.MaxInt64) {
		t.Fatalf("resume %+v without the table: want the WAL position and no bound on rows", rs)
	}
}

// A relay that made a row dead and died before the slot confirmed its
// transaction: the next one, streaming that transaction again, skips the
// dead row and publishes the rest.
func TestRestartSkipsARowMadeDeadBefore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	b.setUpSlot(t, cfg)
	backlog := b.write(t, "a", "b")
	b.exec(t, `UPDATE outbox SET state = 'dead' WHERE event_id = $1`, backlog[0].ID)
	p := newRecorder()
	cfg.Publisher = p
	run(t, b.newRelay(t, cfg))
	p.waitFor(t, backlog[1])
	if slices.Contains(p.ids(), backlog[0].ID.String()) {
		t.Fatal("the dead row was published again")
	}
}

// A row the relay cannot decode (headers that are not a JSON object of
// strings, written around the Writer) goes dead with the reason, from the
// stream and from the backlog, and the events after it go on.
func TestUndecodableRowGoesDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insertBad := func() {
		b.exec(t, `INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, headers)
			VALUES (gen_random_uuid(), 'orders', 'k', 'x', '\x7b7d', '{"n": 1}')`)
	}
	insertBad() // before the slot: the backlog
	b.startRelay(t)
	insertBad() // through the stream
	b.pub.waitFor(t, b.write(t, "k")...)
	testkit.WaitFor(t, 10*time.Second, "both undecodable rows dead", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox WHERE state = 'dead' AND last_error LIKE 'cannot decode:%headers%'`) == 2
	})
}

// Failover slots need PostgreSQL 17: an older server is refused at start.
func TestFailoverNeedsPostgreSQL17(t *testing.T) {
	t.Parallel()
	if err := (serverFacts{VersionNum: 160004}).checkFailover(true); !errors.Is(err, ErrUnsupported) {
		t.Errorf("16 with Failover: %v, want ErrUnsupported", err)
	}
	for _, f := range []struct {
		version  int
		failover bool
	}{{170002, true}, {160004, false}} {
		if err := (serverFacts{VersionNum: f.version}).checkFailover(f.failover); err != nil {
			t.Errorf("%d, failover %v: %v", f.version, f.failover, err)
		}
	}
}

// A writer and a relay that name the same outbox table differently (one
// schema-qualified, one by the search_path) both work for rows; the
// relay must not silently drop the writer's table-less events either.
func TestTableLessEventsOfTheSameTableNamedOtherwise(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.Table = txoutbox.Table{} // "outbox" on the search_path: the test's schema
	cfg.Slot, cfg.Publication = b.defaultName(), b.defaultName()
	runActive(t, b.newRelay(t, cfg))
	tableLess := b.writeTableLess(t, "k")
	row := b.write(t, "k")
	b.pub.waitFor(t, row...)
	if !testkit.Eventually(5*time.Second, func() bool { return slices.Contains(b.pub.ids(), tableLess[0].ID.String()) }) {
		t.Fatalf("the row event went out, the table-less event written before it did not: published %v", b.pub.ids())
	}
}

// A transaction takes its row id (nextval) before its transaction id when
// the insert is its first write (and nextval need not WAL-log the
// sequence). If a cleanup round passes that id while the row is not yet
// visible, the row, once committed and published, must still be cleaned
// up by a later round, not stay pending forever. Emulated here with the
// id taken by an earlier nextval; with a Retention the table never empties,
// so the cleanup's floor never moves back.
func TestCleanupRemovesARowWhoseIdWasTakenBeforeARound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cfg := b.config()
	cfg.Retention = time.Hour
	runActive(t, b.newRelay(t, cfg))
	var id int64
	if err := b.db.SQL.QueryRowContext(ctx, `SELECT nextval(pg_get_serial_sequence('outbox', 'id'))`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	later := b.write(t, "a", "b")
	b.pub.waitFor(t, later...)
	testkit.WaitFor(t, 20*time.Second, "a round marked the later rows", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox WHERE state = 'pending'`) == 0
	})
	ev := b.events(t, "k")[0]
	b.exec(t, `INSERT INTO outbox (id, event_id, topic, aggregate_type, aggregate_id, event_type, content_type, payload, headers)
		OVERRIDING SYSTEM VALUE VALUES ($1, $2, $3, $4, $5, $6, $7, $8, '{}')`,
		id, ev.ID, ev.Topic, ev.AggregateType, ev.AggregateID, ev.Type, ev.ContentType, ev.Payload)
	b.pub.waitFor(t, ev)
	more := b.write(t, "c")
	b.pub.waitFor(t, more...)
	testkit.WaitFor(t, 10*time.Second, "the cleanup marked every published row", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox WHERE state = 'pending'`) == 0
	})
}
