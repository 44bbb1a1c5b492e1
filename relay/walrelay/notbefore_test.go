package walrelay

import (
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// openFor waits until tx has been open for d by the database's clock: its
// statements' clock is then d past its now().
func openFor(t *testing.T, tx *sql.Tx, d time.Duration) {
	t.Helper()
	testkit.WaitFor(t, d+10*time.Second, "the transaction is open for "+d.String(), func() bool {
		var open bool
		if err := tx.QueryRow(`SELECT clock_timestamp() > now() + $1::interval`, outboxsql.Interval(d)).Scan(&open); err != nil {
			t.Fatal(err)
		}
		return open
	})
}

// A NotBefore already past is due at once in WAL mode, judged by the
// statement's clock: in a transaction open for longer than
// MaxNotBeforeSkew, an event whose NotBefore came after the transaction
// began but before its insert goes in and is published at commit, as is
// one less than MaxNotBeforeSkew ahead (a writer's clock a little ahead of
// the database's), each in its aggregate's order.
func TestPastNotBeforeIsPublishedAtCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startRelay(t)
	tx := b.begin(t)
	defer tx.Rollback() //nolint:errcheck // committed below
	events := b.events(t, "a", "a", "a", "a")
	b.writeIn(t, tx, events[0])
	openFor(t, tx, 2*txoutbox.MaxNotBeforeSkew)
	events[1].NotBefore = time.Now().Add(-100 * time.Millisecond) // after the transaction's now()
	events[2].NotBefore = time.Now().Add(txoutbox.MaxNotBeforeSkew / 2)
	b.writeIn(t, tx, events[1:]...)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	b.pub.waitFor(t, events...)
	var want []string
	for _, e := range events {
		want = append(want, e.ID.String())
	}
	if got := b.pub.ids(); !slices.Equal(got, want) {
		t.Fatalf("published %v, want %v in the order written", got, want)
	}
}
