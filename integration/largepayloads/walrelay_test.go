package largepayloads

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/walrelay"
)

// The WAL relay offloads as the polling relay does (the same publish
// core): large events mixed with small ones arrive whole and in order,
// and a store away holds them back, none dead, until it is back.
func TestWALRelayPublishesLargeEventsThroughAnOutage(t *testing.T) {
	testkit.RequireLogical(t)
	t.Parallel()
	db := testkit.NewOutbox(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		testkit.Eventually(20*time.Second, func() bool { // the slot stays active until its walsender has exited
			_, err := db.SQL.ExecContext(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`,
				walrelay.SlotDefault(db.Database(), db.Table()))
			return err == nil || ctx.Err() != nil
		})
		_, _ = db.SQL.ExecContext(ctx, `DROP PUBLICATION IF EXISTS `+walrelay.PublicationDefault(db.Database(), db.Table()))
	})
	brokers := kafkatest.New(t).ListenAddrs()
	store, dir := fileStore(t)
	f := &flaky{Store: store}
	r, err := walrelay.New(db.URL, publisher(t, brokers), walrelay.Config{
		Table: db.Table(), StandbyRetry: 100 * time.Millisecond, MaxAttempts: 2,
		BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		LargePayloads: relay.LargePayloadsConfig{Store: f},
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(t.Context()) }() // cancelled before the cleanups run
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("WAL relay: %v", err)
		}
	})
	testkit.WaitFor(t, 30*time.Second, "the WAL relay to stream", r.Active)

	wrote := writeMixed(t, db, "wal-docs", 3, 4)
	got := consume(t, brokers, "wal-docs", store, len(wrote))
	checkDelivered(t, wrote, got)

	breakDir(t, dir)
	more := writeMixed(t, db, "wal-docs-2", 2, 2)
	// Two large events (each aggregate's first) failing more than
	// MaxAttempts (2) times each: none may go dead for it.
	testkit.WaitFor(t, 30*time.Second, "uploads to fail past MaxAttempts", func() bool { return f.failed() > 2*2*2 })
	if err := store.Check(context.Background()); err == nil {
		t.Error("Check passed with the store away")
	}
	mendDir(t, dir)
	got = consume(t, brokers, "wal-docs-2", store, len(more))
	checkDelivered(t, more, got)
	if n := objects(t, dir); n != 2 {
		t.Errorf("%d objects in the store after it came back, want the two large events'", n)
	}
}
