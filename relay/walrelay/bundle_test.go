package walrelay

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay/relaytest"
)

// bundle is one test's outbox, writer and recording publisher.
type bundle struct {
	db  *testkit.DB
	w   *txoutbox.Writer
	pub *recorder
}

func setup(t *testing.T) *bundle {
	t.Helper()
	testkit.RequireLogical(t)
	db := testkit.NewOutbox(t)
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: db.Table(), DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{db: db, w: w, pub: newRecorder()}
	t.Cleanup(func() { b.dropSlot(t) })
	return b
}

// relayConfig is what New takes: the connection string, the publisher and
// the Config, in one value the tests change field by field.
type relayConfig struct {
	Config
	ConnString string
	Publisher  message.Publisher
}

// config is a relay configuration for the test's outbox, quick to notice
// and take over.
func (b *bundle) config() relayConfig {
	return relayConfig{ConnString: b.db.URL, Publisher: b.pub, Config: Config{
		Table:           b.db.Table(),
		Lanes:           8,
		BackoffMin:      10 * time.Millisecond,
		BackoffMax:      50 * time.Millisecond,
		PingInterval:    200 * time.Millisecond,
		SenderTimeout:   2 * time.Second,
		StandbyRetry:    100 * time.Millisecond,
		CleanupInterval: 100 * time.Millisecond,
		Logger:          slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}}
}

// defaultName is the default name of the test's slot and publication.
func (b *bundle) defaultName() string { return SlotDefault(b.db.Database(), b.db.Table()) }

// slotByHand creates the relay's default publication (of every column, as
// relays made it before the column list) and slot, as a relay that set
// them up, or half did, leaves them.
func (b *bundle) slotByHand(t *testing.T) (slot, pub string) {
	t.Helper()
	slot, pub = b.defaultName(), b.defaultName()
	b.exec(t, `CREATE PUBLICATION `+pub+` FOR TABLE `+b.db.Table().String()+` WITH (publish = 'insert')`)
	b.exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
	return slot, pub
}

// dropSlot drops the test's slot and publication: a slot left behind
// holds the shared server's WAL forever.
func (b *bundle) dropSlot(t *testing.T) { b.dropSlotNamed(t, b.defaultName()) }

// dropSlotNamed drops slot, of the bundle's database, once its walsender
// is gone, and the publication of its name.
func (b *bundle) dropSlotNamed(t *testing.T, slot string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var err error
	if !testkit.Eventually(20*time.Second, func() bool { // an error while the slot is active: its walsender is exiting
		_, err = b.db.SQL.ExecContext(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE slot_name = $1 AND database = current_database()`, slot)
		return err == nil || ctx.Err() != nil
	}) || err != nil {
		t.Errorf("drop slot %s: %v", slot, err)
	}
	if _, err := b.db.SQL.ExecContext(ctx, `DROP PUBLICATION IF EXISTS `+ident.Quote(slot)); err != nil {
		t.Errorf("drop publication: %v", err)
	}
}

// waitClosed waits until ch is closed, or fails the test after 20s.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out after 20s waiting for %s", what)
	}
}

// run starts r and returns a function that stops it and returns Run's
// error (testkit.Run).
func run(t *testing.T, r *Relay) (stop func() error) {
	t.Helper()
	return testkit.Run(t, r.Run)
}

// runActive is run, returning once r streams: rows written from then on
// come through the slot, not the backlog of rows written before it.
func runActive(t *testing.T, r *Relay) (stop func() error) {
	t.Helper()
	stop = run(t, r)
	testkit.WaitFor(t, 20*time.Second, "the relay streams", r.Active)
	return stop
}

// startRelay runs a relay of the bundle's configuration until it streams:
// the relay and how to stop it (see runActive).
func (b *bundle) startRelay(t *testing.T) (*Relay, func() error) {
	t.Helper()
	r := b.newRelay(t, b.config())
	return r, runActive(t, r)
}

// setUpSlot runs a relay of cfg until it streams, and stops it: its slot
// and publication are set up, with nothing written yet.
func (b *bundle) setUpSlot(t *testing.T, cfg relayConfig) {
	t.Helper()
	stop := runActive(t, b.newRelay(t, cfg))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) newRelay(t *testing.T, cfg relayConfig) *Relay {
	t.Helper()
	r, err := New(cfg.ConnString, cfg.Publisher, cfg.Config)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// write commits events in one transaction, each for its aggregate.
func (b *bundle) write(t *testing.T, aggs ...string) []txoutbox.Event {
	t.Helper()
	events := b.events(t, aggs...)
	b.commit(t, events...)
	return events
}

// commit writes events in one transaction.
func (b *bundle) commit(t *testing.T, events ...txoutbox.Event) {
	t.Helper()
	tx := b.begin(t)
	defer tx.Rollback()
	b.writeIn(t, tx, events...)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// begin starts a transaction; the caller commits it or rolls it back.
func (b *bundle) begin(t *testing.T) *sql.Tx {
	t.Helper()
	tx, err := b.db.SQL.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// writeIn writes events in tx.
func (b *bundle) writeIn(t *testing.T, tx *sql.Tx, events ...txoutbox.Event) {
	t.Helper()
	if err := b.w.Write(context.Background(), tx, events...); err != nil {
		t.Fatal(err)
	}
}

// commitFailing commits an event of aggregate agg whose publishes fail
// with err.
func (b *bundle) commitFailing(t *testing.T, agg string, err error) []txoutbox.Event {
	t.Helper()
	events := b.events(t, agg)
	b.pub.failEvent(events[0].ID.String(), err)
	b.commit(t, events...)
	return events
}

// commitHeld commits an event of aggregate agg whose publish waits until
// release is called or the test ends; holding is closed once it waits.
func (b *bundle) commitHeld(t *testing.T, agg string) (held []txoutbox.Event, holding <-chan struct{}, release func()) {
	t.Helper()
	held = b.events(t, agg)
	holding, release = b.pub.holdEvent(held[0].ID.String())
	t.Cleanup(release)
	b.commit(t, held...)
	return held, holding, release
}

func (b *bundle) events(t *testing.T, aggs ...string) []txoutbox.Event {
	t.Helper()
	var out []txoutbox.Event
	for _, a := range aggs {
		e, err := txoutbox.NewEvent("orders", "order", a, "order.placed", map[string]string{"agg": a})
		if err != nil {
			t.Fatal(err)
		}
		e.Headers = map[string]string{"tenant": "t1"}
		out = append(out, e)
	}
	return out
}

func (b *bundle) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := b.db.SQL.ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func (b *bundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.db.SQL.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// walLSN is the server's current WAL write position.
func (b *bundle) walLSN(t *testing.T) string {
	t.Helper()
	var lsn string
	if err := b.db.SQL.QueryRowContext(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

// waitConfirmed waits until r's slot is confirmed past everything written
// so far.
func (b *bundle) waitConfirmed(t *testing.T, r *Relay) {
	t.Helper()
	end := b.walLSN(t)
	testkit.WaitFor(t, 10*time.Second, "slot confirmed past the events so far", func() bool {
		return b.confirmedPast(t, r.cfg.Slot, end)
	})
}

// waitConfirmedSlot waits until slot is confirmed past the events so far.
func (b *bundle) waitConfirmedSlot(t *testing.T, slot string) {
	t.Helper()
	end := b.walLSN(t)
	testkit.WaitFor(t, 10*time.Second, "slot confirmed past the events so far", func() bool {
		return b.confirmedPast(t, slot, end)
	})
}

// waitStatusUpdates waits until the relay streaming slot has sent the
// server n status updates from now (one at least every PingInterval),
// each with the position it confirms: pg_stat_replication's reply_time
// moved n times.
func (b *bundle) waitStatusUpdates(t *testing.T, slot string, n int) {
	t.Helper()
	replied := func() time.Time {
		var at sql.NullTime
		err := b.db.SQL.QueryRowContext(context.Background(), `SELECT max(r.reply_time) FROM pg_stat_replication r
			JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1`, slot).Scan(&at)
		if err != nil {
			t.Fatal(err)
		}
		return at.Time
	}
	last, seen := replied(), 0
	testkit.WaitFor(t, 20*time.Second, fmt.Sprintf("%d status updates of slot %s", n, slot), func() bool {
		if at := replied(); at.After(last) {
			last, seen = at, seen+1
		}
		return seen >= n
	})
}

// confirmedPast reports whether slot's confirmed_flush_lsn is at lsn or
// past it.
func (b *bundle) confirmedPast(t *testing.T, slot, lsn string) bool {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND confirmed_flush_lsn >= $2::pg_lsn`, slot, lsn) == 1
}

// confirmedLSN is the slot's confirmed_flush_lsn as the server knows it.
func (b *bundle) confirmedLSN(t *testing.T) string {
	t.Helper()
	var lsn sql.NullString
	err := b.db.SQL.QueryRowContext(context.Background(),
		`SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, b.defaultName()).Scan(&lsn)
	if err != nil {
		t.Fatal(err)
	}
	return lsn.String
}

// recorder is relaytest's Publisher, with what these tests wait for and
// the events whose publishes they fail or hold.
type recorder struct{ *relaytest.Publisher }

func newRecorder() *recorder { return &recorder{relaytest.NewPublisher()} }

// failEvent makes the publishes of event id fail with err, until Heal.
func (p *recorder) failEvent(id string, err error) {
	p.Fail(relaytest.Failure{EventID: id, Err: err})
}

// failedTries is how many publishes of event id failed.
func (p *recorder) failedTries(id string) int {
	n := 0
	for _, m := range p.Refused() {
		if m.UUID == id {
			n++
		}
	}
	return n
}

// holdEvent makes the publish of event id wait until release is called;
// holding is closed once a publish of it waits.
func (p *recorder) holdEvent(id string) (holding <-chan struct{}, release func()) {
	gate, reached := make(chan struct{}), make(chan struct{})
	var reachedOnce, releaseOnce sync.Once
	p.OnPublish(func(_ string, m *message.Message) {
		if m.UUID == id {
			reachedOnce.Do(func() { close(reached) })
			<-gate
		}
	})
	return reached, func() { releaseOnce.Do(func() { close(gate) }) }
}

// ids returns the published message UUIDs, in publish order.
func (p *recorder) ids() []string {
	var out []string
	for _, m := range p.Messages() {
		out = append(out, m.UUID)
	}
	return out
}

// message is the published message of event id, or nil.
func (p *recorder) message(id string) *message.Message {
	for _, m := range p.Messages() {
		if m.UUID == id {
			return m.Message
		}
	}
	return nil
}

// waitFor waits until every event of events was published.
func (p *recorder) waitFor(t *testing.T, events ...txoutbox.Event) {
	t.Helper()
	testkit.WaitFor(t, 20*time.Second, fmt.Sprintf("%d events published", len(events)), func() bool {
		seen := map[string]bool{}
		for _, id := range p.ids() {
			seen[id] = true
		}
		for _, e := range events {
			if !seen[e.ID.String()] {
				return false
			}
		}
		return true
	})
}
