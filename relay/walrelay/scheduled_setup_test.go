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
	if b.publicationExists(t, r.Publication()) {
		t.Errorf("the publication the relay created is still there")
	}
}

// A relay that refuses to set its slot up (events scheduled for later,
// polling relays still running) leaves nothing behind: it drops the
// publication it created. One it found, an operator's, stays.
func TestRefusedSetupLeavesNoPublication(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		prepare func(*testing.T, *bundle)
		want    error
	}{
		{"scheduled", func(t *testing.T, b *bundle) {
			ev := b.events(t, "a")
			ev[0].NotBefore = time.Now().Add(time.Hour)
			b.commit(t, ev...)
		}, ErrScheduled},
		{"polling", func(t *testing.T, b *bundle) {
			b.exec(t, `INSERT INTO outbox_relays (id, host) VALUES ('poller', 'host')`)
		}, ErrPollingRelays},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, found := range []bool{false, true} {
				b := setup(t)
				tc.prepare(t, b)
				r := b.newRelay(t, b.config())
				if found {
					b.exec(t, `CREATE PUBLICATION `+b.defaultName()+` FOR TABLE `+b.db.Table().String()+` WITH (publish = 'insert')`)
				}
				wantRunError(t, runErr(t, r), tc.want, 20*time.Second)
				if got := b.publicationExists(t, r.Publication()); got != found {
					t.Errorf("publication found before the relay: %v; there after it refused: %v", found, got)
				}
			}
		})
	}
}

// publicationExists reports whether publication name exists.
func (b *bundle) publicationExists(t *testing.T, name string) bool {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM pg_publication WHERE pubname = $1`, name) == 1
}
