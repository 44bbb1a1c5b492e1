package walrelay

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// A partitioned outbox (docs/partitions.md) is streamed through its root:
// the relay's publication publishes via the partition root, so the rows of
// every partition, those created after the slot too, arrive as the
// table's, and the cleanup deletes them through the parent.
func TestPartitionedOutbox(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m, err := migrations.New(b.db.SQL, migrations.Config{Table: b.db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Partition(context.Background(), 20); err != nil { // the first partition ends at 40, the next at 60
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.CleanupBatch = 7
	events := b.write(t, "a", "b") // the backlog, before the slot
	runActive(t, b.newRelay(t, cfg))
	for range 30 { // ids up to 92: past the partitions, into the default one
		events = append(events, b.write(t, "a", "b", "c")...)
	}
	if err := m.Partition(context.Background(), 20); err != nil { // a job creates partitions from 120 on
		t.Fatal(err)
	}
	b.exec(t, `SELECT setval(pg_get_serial_sequence('outbox', 'id'), 119)`)
	for range 5 { // ids 120-134, in a partition created after the slot
		events = append(events, b.write(t, "a", "b", "c")...)
	}
	b.pub.waitFor(t, events...)
	if n := b.count(t, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox'::regclass`); n < 5 {
		t.Fatalf("%d partitions", n)
	}
	testkit.WaitFor(t, 20*time.Second, "every row cleaned up", func() bool {
		return b.count(t, `SELECT count(*) FROM outbox`) == 0
	})
}
