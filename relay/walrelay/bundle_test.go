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
	for {
		_, err := b.db.SQL.ExecContext(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE slot_name = $1 AND database = current_database()`, slot)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Errorf("drop slot %s: %v", slot, err)
			break
		}
		time.Sleep(100 * time.Millisecond) // still active: its walsender is exiting
	}
	if _, err := b.db.SQL.ExecContext(ctx, `DROP PUBLICATION IF EXISTS `+ident.Quote(slot)); err != nil {
		t.Errorf("drop publication: %v", err)
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
// release is called or the test ends.
func (b *bundle) commitHeld(t *testing.T, agg string) (held []txoutbox.Event, release func()) {
	t.Helper()
	held = b.events(t, agg)
	release = b.pub.holdEvent(held[0].ID.String())
	t.Cleanup(release)
	b.commit(t, held...)
	return held, release
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

// recorder is a publisher that records what it published, and can hold
// or fail the publishes of chosen events.
type recorder struct {
	mu    sync.Mutex
	msgs  []*message.Message
	topic []string
	hold  map[string]chan struct{} // event id -> closed to let it through
	fail  map[string]error         // event id -> the error its publishes return
	tries map[string]int           // event id -> publishes that failed
	got   chan struct{}
}

func newRecorder() *recorder {
	return &recorder{hold: map[string]chan struct{}{}, fail: map[string]error{}, tries: map[string]int{}, got: make(chan struct{}, 1)}
}

func (p *recorder) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		p.mu.Lock()
		h := p.hold[m.UUID]
		err := p.fail[m.UUID]
		p.mu.Unlock()
		if h != nil {
			<-h
		}
		if err != nil {
			p.mu.Lock()
			p.tries[m.UUID]++
			p.mu.Unlock()
			return err
		}
		p.mu.Lock()
		p.msgs = append(p.msgs, m)
		p.topic = append(p.topic, topic)
		p.mu.Unlock()
		select {
		case p.got <- struct{}{}:
		default:
		}
	}
	return nil
}

func (*recorder) Close() error { return nil }

// failEvent makes the publishes of event id fail with err, or, with a nil
// err, go through again.
func (p *recorder) failEvent(id string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		delete(p.fail, id)
		return
	}
	p.fail[id] = err
}

// failedTries is how many publishes of event id failed.
func (p *recorder) failedTries(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tries[id]
}

// holdEvent makes the publish of event id wait until the returned
// function is called.
func (p *recorder) holdEvent(id string) (release func()) {
	ch := make(chan struct{})
	p.mu.Lock()
	p.hold[id] = ch
	p.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// ids returns the published message UUIDs, in publish order.
func (p *recorder) ids() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, len(p.msgs))
	for i, m := range p.msgs {
		out[i] = m.UUID
	}
	return out
}

func (p *recorder) message(id string) *message.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.msgs {
		if m.UUID == id {
			return m
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
