package walrelay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

// A scheduled event of a transaction in progress while the relay sets its
// slot up passes the check before the slot (it is not committed yet), and
// the slot waits for it: the relay finds it in the slot's snapshot,
// publishes nothing, drops the slot (so the polling relay can publish the
// event when it is due) and stops with ErrScheduled.
func TestScheduledEventCommittedWhileTheSlotIsMadeIsNotPublished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := b.events(t, "a")
	ev[0].NotBefore = time.Now().Add(time.Hour)
	ctx := context.Background()
	tx := b.begin(t)
	defer tx.Rollback() //nolint:errcheck // committed below
	b.writeIn(t, tx, ev...)
	r := b.newRelay(t, b.config())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	testkit.WaitFor(t, 20*time.Second, "the slot appears", func() bool {
		return b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, b.defaultName()) == 1
	})
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrScheduled) {
			t.Fatalf("Run = %v, want ErrScheduled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop")
	}
	if ids := b.pub.ids(); len(ids) != 0 {
		t.Fatalf("event scheduled for an hour from now published at once: %v", ids)
	}
	if n := b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, b.defaultName()); n != 0 {
		t.Fatal("the slot is still there: the polling relay could not publish the scheduled event")
	}
}
