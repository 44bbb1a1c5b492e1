package engines_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/relaytest"
)

// The polling relay on MySQL, on the MariaDB of .ci/services, through
// its exported API: relay.New on a *sql.DB of go-sql-driver/mysql.

// relayBundle is a migrated MySQL outbox of the test's own.
type relayBundle struct {
	t  *testing.T
	db *sql.DB
	w  *txoutbox.Writer
}

func setupMySQLRelay(t *testing.T) *relayBundle {
	t.Helper()
	testkit.MySQLURL(t)
	db := testkit.NewOutboxOn(t, testkit.MySQL)
	db.SQL.SetMaxIdleConns(20)
	return &relayBundle{t: t, db: db.SQL, w: db.Writer(t)}
}

// config is a relay configuration paced for tests.
func (b *relayBundle) config(id string) relay.Config {
	return relay.Config{
		ID:                id,
		PollInterval:      20 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
		StaleAfter:        2 * time.Second,
		LeaseDuration:     5 * time.Second,
		BackoffMin:        10 * time.Millisecond,
		BackoffMax:        50 * time.Millisecond,
		OutageBackoffMax:  100 * time.Millisecond,
		FlushInterval:     5 * time.Millisecond,
		PublishTimeout:    time.Second,
		StatementTimeout:  5 * time.Second,
		LockTimeout:       time.Second,
		Logger:            testLogger(b.t),
	}
}

// start runs a relay on pub until the test ends or its stop is called,
// which waits for Run to return.
func (b *relayBundle) start(t *testing.T, pub *relaytest.Publisher, cfg relay.Config) (*relay.Relay, func()) {
	t.Helper()
	r, err := relay.New(b.db, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("relay %s: Run: %v", cfg.ID, err)
			}
		})
	}
	t.Cleanup(stop)
	return r, stop
}

// writeEvents commits events n from to to-1 of aggregate agg, one
// transaction each, and returns their ids.
func (b *relayBundle) writeEvents(t testing.TB, agg string, from, to int) []string {
	t.Helper()
	var ids []string
	for n := from; n < to; n++ {
		e := event(agg, n)
		tx, err := b.db.Begin()
		if err != nil {
			t.Error(err)
			return ids
		}
		if err := b.w.Write(context.Background(), tx, e); err != nil {
			tx.Rollback()
			t.Error(err)
			return ids
		}
		if err := tx.Commit(); err != nil {
			t.Error(err)
			return ids
		}
		ids = append(ids, e.ID.String())
	}
	return ids
}

// published merges what pubs acknowledged, in the order of their first
// publish on each publisher: per event id, whether it was published.
func published(pubs ...*relaytest.Publisher) map[string]bool {
	out := map[string]bool{}
	for _, p := range pubs {
		for _, m := range p.Messages() {
			out[m.UUID] = true
		}
	}
	return out
}

// waitPublished waits until every one of ids was published by pubs.
func waitPublished(t *testing.T, ids []string, pubs ...*relaytest.Publisher) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%d events published", len(ids)), func() bool {
		got := published(pubs...)
		for _, id := range ids {
			if !got[id] {
				return false
			}
		}
		return true
	})
}

// orderOf reads the event's n from its payload.
func orderOf(t *testing.T, m relaytest.Published) int {
	t.Helper()
	var p struct{ N int }
	if err := json.Unmarshal(m.Payload, &p); err != nil {
		t.Fatalf("payload %q: %v", m.Payload, err)
	}
	return p.N
}

// checkOrder fails the test when an event of an aggregate was first
// published before an earlier one of its aggregate (n lower) had been:
// the messages of one publisher, in its order.
func checkOrder(t *testing.T, msgs []relaytest.Published) {
	t.Helper()
	seen := map[string]bool{}
	next := map[string]int{} // per aggregate, the n expected next
	for _, m := range msgs {
		if seen[m.UUID] {
			continue // a redelivery
		}
		seen[m.UUID] = true
		n := orderOf(t, m)
		if n != next[m.Key] {
			t.Errorf("aggregate %s: event %d first published when %d was expected", m.Key, n, next[m.Key])
		}
		next[m.Key] = n + 1
	}
}

// Three relays publish every event of many aggregates written
// concurrently, each aggregate in order (they share one publisher, whose
// record is the brokers' order), while publishes fail now and then (the
// rows retried after a backoff) and a relay leaves and another joins
// (its shards handed over with rows in flight).
func TestMySQLRelayThreeRelaysPublishAllInOrder(t *testing.T) {
	t.Parallel()
	b := setupMySQLRelay(t)
	pub := relaytest.NewPublisher()
	var (
		mu      sync.Mutex
		publish int
	)
	pub.OnPublish(func(_ string, m *message.Message) {
		mu.Lock()
		publish++
		k := publish
		mu.Unlock()
		if k%7 == 0 {
			pub.Fail(relaytest.Failure{EventID: m.UUID, Times: 1})
		}
	})
	stops := make([]func(), 3)
	for i := range stops {
		_, stops[i] = b.start(t, pub, b.config(fmt.Sprintf("relay-%d", i)))
	}
	var (
		ids []string
		wg  sync.WaitGroup
	)
	for a := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := b.writeEvents(t, fmt.Sprintf("agg-%d", a), 0, 40)
			mu.Lock()
			ids = append(ids, got...)
			mu.Unlock()
		}()
	}
	testkit.WaitFor(t, 30*time.Second, "a third of the events published", func() bool { return len(published(pub)) >= 12*40/3 })
	stops[0]()
	b.start(t, pub, b.config("relay-3"))
	wg.Wait()
	waitPublished(t, ids, pub)
	checkOrder(t, pub.Messages())
}

// A relay stopped while a publish hangs leaves; another takes its rows
// over and publishes them, in order.
func TestMySQLRelayStoppedIsTakenOver(t *testing.T) {
	t.Parallel()
	b := setupMySQLRelay(t)
	hang := make(chan struct{})
	defer close(hang)
	pubA := relaytest.NewPublisher()
	var first sync.Once
	started := make(chan struct{})
	pubA.OnPublish(func(string, *message.Message) {
		first.Do(func() { close(started) })
		<-hang
	})
	ids := b.writeEvents(t, "agg", 0, 20)
	// Leases and staleness longer than the test: B takes the rows over
	// only because A released them and left.
	long := func(cfg relay.Config) relay.Config {
		cfg.LeaseDuration, cfg.StaleAfter = 2*time.Minute, 2*time.Minute
		return cfg
	}
	cfgA := long(b.config("relay-a"))
	cfgA.PublishTimeout = 200 * time.Millisecond
	_, stopA := b.start(t, pubA, cfgA)
	<-started
	stopA()
	pubB := relaytest.NewPublisher()
	b.start(t, pubB, long(b.config("relay-b")))
	waitPublished(t, ids, pubB)
	checkOrder(t, pubB.Messages())
	if n := len(pubA.Messages()); n != 0 {
		t.Fatalf("the stopped relay's publisher acknowledged %d messages, want 0", n)
	}
}

// A publish failure is retried with backoff until it passes; an event the
// broker refuses for its own fault goes dead after MaxAttempts, and the
// later events of its aggregate flow past it.
func TestMySQLRelayRetryAndDead(t *testing.T) {
	t.Parallel()
	b := setupMySQLRelay(t)
	pub := relaytest.NewPublisher()
	retried := b.writeEvents(t, "retried", 0, 1)
	bad := b.writeEvents(t, "bad", 0, 1)
	pub.Fail(relaytest.Failure{EventID: retried[0], Times: 2})
	pub.Fail(relaytest.Failure{EventID: bad[0], Permanent: true})
	cfg := b.config("relay")
	cfg.MaxAttempts = 3
	r, _ := b.start(t, pub, cfg)
	later := b.writeEvents(t, "bad", 1, 4)
	waitPublished(t, append(retried, later...), pub)
	var state string
	var attempts int
	testkit.WaitFor(t, 10*time.Second, "the refused event dead", func() bool {
		err := b.db.QueryRow(`SELECT state, attempts FROM outbox WHERE event_id = ?`, bad[0]).Scan(&state, &attempts)
		return err == nil && state == "dead"
	})
	if attempts != 3 {
		t.Fatalf("dead event: %d attempts, want 3", attempts)
	}
	if err := b.db.QueryRow(`SELECT attempts FROM outbox WHERE event_id = ?`, retried[0]).Scan(&attempts); err != nil || attempts != 2 {
		t.Fatalf("retried event: %d attempts (%v), want 2", attempts, err)
	}
	if published(pub)[bad[0]] {
		t.Fatal("the refused event was acknowledged")
	}
	testkit.WaitFor(t, 10*time.Second, "Stats: one dead, no backlog", func() bool {
		s, err := r.Stats(context.Background())
		return err == nil && s.Dead == 1 && s.Backlog == 0
	})
}

// A relay whose incarnation row is deleted (declared dead by peers) ends
// its incarnation and registers anew, and publishes on, in order.
func TestMySQLRelayIncarnationDeleted(t *testing.T) {
	t.Parallel()
	b := setupMySQLRelay(t)
	pub := relaytest.NewPublisher()
	r, _ := b.start(t, pub, b.config("relay"))
	ids := b.writeEvents(t, "agg", 0, 10)
	waitPublished(t, ids, pub)
	old := r.Health().Incarnation
	if _, err := b.db.Exec(`DELETE FROM outbox_relays WHERE id = ?`, old); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "a new incarnation", func() bool {
		h := r.Health()
		return h.Incarnation != "" && h.Incarnation != old && h.Heartbeating
	})
	ids = append(ids, b.writeEvents(t, "agg", 10, 20)...)
	waitPublished(t, ids, pub)
	checkOrder(t, pub.Messages())
}

// A row that cannot become a message (its headers not a JSON object of
// strings, its event_id not a UUID) is made dead by the claim that took
// it, with its error, and the events after it flow.
func TestMySQLRelayUndecodableRowsDead(t *testing.T) {
	t.Parallel()
	b := setupMySQLRelay(t)
	badHeaders := b.writeEvents(t, "a", 0, 1)
	badID := b.writeEvents(t, "b", 0, 1)
	if _, err := b.db.Exec(`UPDATE outbox SET headers = '{"n": 1}' WHERE event_id = ?`, badHeaders[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec(`UPDATE outbox SET event_id = 'not-a-uuid' WHERE event_id = ?`, badID[0]); err != nil {
		t.Fatal(err)
	}
	later := append(b.writeEvents(t, "a", 1, 3), b.writeEvents(t, "b", 1, 3)...)
	pub := relaytest.NewPublisher()
	b.start(t, pub, b.config("relay"))
	waitPublished(t, later, pub)
	for _, id := range []string{badHeaders[0], "not-a-uuid"} {
		var (
			state    string
			attempts int
			lastErr  sql.NullString
		)
		if err := b.db.QueryRow(`SELECT state, attempts, last_error FROM outbox WHERE event_id = ?`, id).Scan(&state, &attempts, &lastErr); err != nil {
			t.Fatal(err)
		}
		if state != "dead" || attempts != 1 || !strings.Contains(lastErr.String, "undecodable event") {
			t.Fatalf("row %s: state %s, attempts %d, last_error %q; want dead after 1 attempt, undecodable", id, state, attempts, lastErr.String)
		}
	}
	if n := len(pub.Messages()); n != len(later) {
		t.Fatalf("%d messages published, want %d", n, len(later))
	}
}

// The pruner deletes published rows older than Retention.
func TestMySQLRelayPrunes(t *testing.T) {
	t.Parallel()
	b := setupMySQLRelay(t)
	pub := relaytest.NewPublisher()
	cfg := b.config("relay")
	cfg.Retention = time.Millisecond
	cfg.PruneInterval = 50 * time.Millisecond
	cfg.StatsInterval = 20 * time.Millisecond
	b.start(t, pub, cfg)
	ids := b.writeEvents(t, "agg", 0, 10)
	waitPublished(t, ids, pub)
	testkit.WaitFor(t, 20*time.Second, "the published rows pruned", func() bool {
		var n int
		return b.db.QueryRow(`SELECT COUNT(*) FROM outbox`).Scan(&n) == nil && n == 0
	})
}

// Another session holding the table (LOCK TABLES ... WRITE) locks the
// relay out: Health says so, and it publishes again once the lock is gone.
func TestMySQLRelayLockout(t *testing.T) {
	t.Parallel()
	b := setupMySQLRelay(t)
	pub := relaytest.NewPublisher()
	r, _ := b.start(t, pub, b.config("relay"))
	testkit.WaitFor(t, 10*time.Second, "the relay heartbeating", func() bool { return r.Health().Heartbeating })
	ctx := context.Background()
	conn, err := b.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `LOCK TABLES outbox WRITE`); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "Health.Locked", func() bool { return r.Health().Locked })
	if _, err := conn.ExecContext(ctx, `UNLOCK TABLES`); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the lockout over", func() bool { return !r.Health().Locked })
	ids := b.writeEvents(t, "agg", 0, 5)
	waitPublished(t, ids, pub)
}

// An operator's transaction holding the claim gate (the claim floor's
// row FOR UPDATE, as a retry or replay does) past LockTimeout locks the
// relay out too, until it ends.
func TestMySQLRelayLockoutGateHeld(t *testing.T) {
	t.Parallel()
	b := setupMySQLRelay(t)
	pub := relaytest.NewPublisher()
	r, _ := b.start(t, pub, b.config("relay"))
	testkit.WaitFor(t, 10*time.Second, "the relay heartbeating", func() bool { return r.Health().Heartbeating })
	tx := readCommitted(t, b.db)
	if _, err := tx.Exec(`SELECT floor FROM outbox_claim_floor WHERE one = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "Health.Locked", func() bool { return r.Health().Locked })
	ids := b.writeEvents(t, "agg", 0, 3)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "the lockout over", func() bool { return !r.Health().Locked })
	waitPublished(t, ids, pub)
}

// What the relay cannot run on MySQL is refused with ErrInvalidConfig,
// naming docs/mysql.md.
func TestMySQLRelayRefusals(t *testing.T) {
	t.Parallel()
	b := setupMySQLRelay(t)
	pub := relaytest.NewPublisher()
	cfg := b.config("relay")
	cfg.Table.Schema = "other"
	if _, err := relay.New(b.db, pub, cfg); !errors.Is(err, relay.ErrInvalidConfig) {
		t.Fatalf("New with Table.Schema: %v, want ErrInvalidConfig", err)
	}
	if _, err := relay.NewGroup(b.db, pub, relay.GroupConfig{Schemas: []string{"a"}}); !errors.Is(err, relay.ErrInvalidConfig) {
		t.Fatalf("NewGroup: %v, want ErrInvalidConfig", err)
	}
	if _, err := relay.FindTables(context.Background(), b.db, relay.GroupConfig{Schemas: []string{"a"}}); !errors.Is(err, relay.ErrInvalidConfig) {
		t.Fatalf("FindTables: %v, want ErrInvalidConfig", err)
	}
	// A partitioned outbox: Run refuses it at start.
	if _, err := b.db.Exec(`ALTER TABLE outbox PARTITION BY HASH (id) PARTITIONS 2`); err != nil {
		t.Fatalf("partition the MySQL outbox: %v", err)
	}
	r, err := relay.New(b.db, pub, b.config("relay"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Run(ctx); !errors.Is(err, relay.ErrInvalidConfig) {
		t.Fatalf("Run on a partitioned outbox: %v, want ErrInvalidConfig", err)
	}
}

// testLogger logs a relay's warnings and errors to the test's log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// testWriter writes a relay's log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// A relay registering beside another relay's registration (its row
// inserted, not committed) waits for it rather than deadlocking with it:
// each looks for its name's earlier incarnations with a locking read of
// outbox_relays, which waits for the other's uncommitted row, so neither
// may hold a row of its own yet.
func TestMySQLRelayRegistersBesideAnotherRegistering(t *testing.T) {
	t.Parallel()
	b := setupMySQLRelay(t)
	other := readCommitted(t, b.db)
	if _, err := other.Exec(`INSERT INTO outbox_relays (id, name, host, started_at, heartbeat_at)
VALUES ('other-1', 'other', '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`); err != nil {
		t.Fatal(err)
	}
	var logs testkit.SyncBuffer
	cfg := b.config("relay")
	cfg.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, &logs), &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.LockTimeout, cfg.StatementTimeout = 20*time.Second, 30*time.Second // the wait outlasts the test's steps
	pub := relaytest.NewPublisher()
	r, _ := b.start(t, pub, cfg)
	testkit.WaitFor(t, 10*time.Second, "the relay's look for its predecessors waiting", func() bool {
		var n int
		err := b.db.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
WHERE ID <> CONNECTION_ID() AND DB = DATABASE() AND INFO LIKE '%outbox_relays%FOR UPDATE%'`).Scan(&n)
		return err == nil && n > 0
	})
	// The other relay's look for its predecessors, as register runs it.
	if _, err := other.Exec(`SELECT id FROM outbox_relays WHERE name = 'other' AND id <> 'other-1' FOR UPDATE`); err != nil {
		t.Fatalf("the other registration: %v", err)
	}
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the relay heartbeating", func() bool { return r.Health().Heartbeating })
	ids := b.writeEvents(t, "agg", 0, 3)
	waitPublished(t, ids, pub)
	if s := logs.String(); strings.Contains(s, "1213") || strings.Contains(s, "Deadlock") {
		t.Errorf("the relay's registration deadlocked:\n%s", s)
	}
}
