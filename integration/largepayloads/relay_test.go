package largepayloads

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// Large events mixed with small ones of the same aggregates arrive whole
// and in order per aggregate: the large as references, the small as they
// were.
func TestPollingRelayPublishesLargeEventsInOrder(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	brokers := kafkatest.New(t).ListenAddrs()
	store, dir := fileStore(t)
	wrote := writeMixed(t, db, "docs", 3, 6)
	runRelay(t, db, publisher(t, brokers), fastConfig(db, store))
	got := consume(t, brokers, "docs", store, len(wrote))
	checkDelivered(t, wrote, got)
	if n := objects(t, dir); n != 9 {
		t.Errorf("%d objects in the store, want one per large event (9)", n)
	}
}

// With the store away, events wait, the large ones and those behind them
// in their aggregate, for as long as it lasts, and none goes dead; Check
// (the readiness probe's) names the store. Once it is back, everything is
// delivered in order.
func TestStoreOutageHoldsEventsBackUntilItEnds(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	brokers := kafkatest.New(t).ListenAddrs()
	store, dir := fileStore(t)
	breakDir(t, dir)
	wrote := writeMixed(t, db, "docs", 2, 4)
	cfg := fastConfig(db, store)
	cfg.MaxAttempts = 2 // an outage must not make events dead, however many attempts
	r := runRelay(t, db, publisher(t, brokers), cfg)

	// Each aggregate starts with a large event, which holds the rest of
	// its aggregate back.
	failedOften := func() int {
		var n int
		if err := db.SQL.QueryRowContext(context.Background(),
			`SELECT count(*) FROM outbox WHERE attempts > $1 AND last_error LIKE '%claim check: store the payload%'`, cfg.MaxAttempts).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testkit.WaitFor(t, 30*time.Second, "each aggregate's first event to fail on the store more than MaxAttempts times", func() bool { return failedOften() == 2 })
	if err := store.Check(context.Background()); err == nil || !strings.Contains(err.Error(), store.Name()) {
		t.Errorf("Check with the store away = %v, want an error naming %s", err, store.Name())
	}
	testkit.WaitFor(t, 30*time.Second, "the relay's Health to name the store", func() bool {
		err := r.Health().LargePayloads
		return err != nil && strings.Contains(err.Error(), store.Name())
	})
	if st := states(t, db); st["dead"] != 0 || st["published"] != 0 {
		t.Fatalf("rows by state %v during the outage: want none dead, none published (each aggregate waits on its first)", st)
	}
	mendDir(t, dir)
	got := consume(t, brokers, "docs", store, len(wrote))
	checkDelivered(t, wrote, got)
	testkit.WaitFor(t, 10*time.Second, "Check to pass after the outage", func() bool { return store.Check(context.Background()) == nil })
	testkit.WaitFor(t, 30*time.Second, "the relay's Health to pass after the outage", func() bool { return r.Health().LargePayloads == nil })
	if st := states(t, db); st["dead"] != 0 {
		t.Fatalf("rows by state %v: want none dead", st)
	}
}

// A relay that stops between uploading a payload and publishing its
// reference (a crash, a failed publish) leaves the row pending: it is
// published later, under the same single object.
func TestFailureBetweenUploadAndPublishLosesNothing(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	brokers := kafkatest.New(t).ListenAddrs()
	store, dir := fileStore(t)
	f := &flaky{Store: store, failAfter: 1}
	wrote := writeMixed(t, db, "docs", 1, 2)
	runRelay(t, db, publisher(t, brokers), fastConfig(db, f))
	got := consume(t, brokers, "docs", store, len(wrote))
	checkDelivered(t, wrote, got)
	if len(f.failedAfter) != 1 || f.failedAfter[0] != wrote[0].id {
		t.Fatalf("failed after the upload: %v, want the large event %s", f.failedAfter, wrote[0].id)
	}
	if n := f.count(wrote[0].id); n < 2 {
		t.Errorf("the large event was uploaded %d times, want again after the failure", n)
	}
	if n := objects(t, dir); n != 1 {
		t.Errorf("%d objects in the store, want 1", n)
	}
	if len(got) != len(wrote) {
		t.Errorf("%d records for %d events: the failed attempt reached the broker", len(got), len(wrote))
	}
}
