package largepayloads

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// The WAL relay offloads as the polling relay does (the same publish
// core): large events mixed with small ones arrive whole and in order,
// and a store away holds them back, none dead, until it is back.
func TestWALRelayPublishesLargeEventsThroughAnOutage(t *testing.T) {
	testkit.RequireLogical(t)
	t.Parallel()
	db := testkit.NewOutbox(t)
	brokers := kafkatest.New(t).ListenAddrs()
	store, dir := fileStore(t)
	f := &flaky{Store: store}
	r := runWALRelay(t, db, publisher(t, brokers), f)

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
	testkit.WaitFor(t, 30*time.Second, "the WAL relay's Health to name the store", func() bool {
		err := r.Health().LargePayloads
		return err != nil && strings.Contains(err.Error(), store.Name())
	})
	mendDir(t, dir)
	got = consume(t, brokers, "wal-docs-2", store, len(more))
	checkDelivered(t, more, got)
	testkit.WaitFor(t, 30*time.Second, "the WAL relay's Health to pass after the outage", func() bool { return r.Health().LargePayloads == nil })
	if n := objects(t, dir); n != 2 {
		t.Errorf("%d objects in the store after it came back, want the two large events'", n)
	}
}
