package relaye2e

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/relay"
)

func TestRetentionPrunesOnlyOldPublishedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, "orders", 30, 3)
	// 10 published long ago, 10 published just now, 5 dead long ago, 5 pending.
	if _, err := b.db.SQL.Exec(`
		UPDATE outbox SET state = 'published', published_at = now() - interval '2 hours', created_at = now() - interval '2 hours' WHERE id <= 10;
		UPDATE outbox SET state = 'published', published_at = now() WHERE id > 10 AND id <= 20;
		UPDATE outbox SET state = 'dead', attempts = 10, created_at = now() - interval '3 hours' WHERE id > 20 AND id <= 25;`); err != nil {
		t.Fatal(err)
	}
	cfg := b.fastConfig()
	cfg.Retention = time.Hour
	cfg.PruneBatch = 3 // several batches
	r, err := relay.New(b.db.SQL, &flakyPublisher{failLeft: map[string]int{}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	n, err := r.Prune(context.Background())
	if err != nil || n != 10 {
		t.Fatalf("Prune = %d, %v; want the 10 old published rows", n, err)
	}
	if left := count(t, b.db, "SELECT count(*) FROM outbox"); left != 20 {
		t.Fatalf("%d rows left, want 20", left)
	}
	if dead := count(t, b.db, "SELECT count(*) FROM outbox WHERE state = 'dead'"); dead != 5 {
		t.Fatalf("dead rows pruned: %d left", dead)
	}
}
