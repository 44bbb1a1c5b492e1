package inboxe2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/inbox"
)

func TestPrune(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// 25 rows processed two days ago, 5 an hour ago; batches of 10 take
	// three statements, the last one short.
	if _, err := b.db.SQL.ExecContext(ctx, `
		INSERT INTO inbox (consumer, event_id, processed_at)
		SELECT 'c' || (i % 3), gen_random_uuid(), now() - interval '2 days' FROM generate_series(1, 25) AS i;
		INSERT INTO inbox (consumer, event_id, processed_at)
		SELECT 'c', gen_random_uuid(), now() - interval '1 hour' FROM generate_series(1, 5)`); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{Table: txoutbox.Table{Schema: b.db.Schema}, PruneBatch: 10})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ib.Prune(ctx, b.db.SQL, 24*time.Hour); n != 25 || err != nil {
		t.Fatalf("Prune(24h) = %d, %v; want 25", n, err)
	}
	if n := count(t, b.db.SQL, `SELECT count(*) FROM inbox`); n != 5 {
		t.Fatalf("rows left = %d, want the 5 recent ones", n)
	}
	if n, err := ib.Prune(ctx, b.db.SQL, 24*time.Hour); n != 0 || err != nil {
		t.Fatalf("second Prune(24h) = %d, %v; want 0", n, err)
	}
	if n, err := ib.Prune(ctx, b.db.SQL, 30*time.Minute); n != 5 || err != nil {
		t.Fatalf("Prune(30m) = %d, %v; want 5", n, err)
	}
}

func TestPruneRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.db.SQL.Exec(`INSERT INTO inbox (consumer, event_id) VALUES ('c', gen_random_uuid())`); err != nil {
		t.Fatal(err)
	}
	_, err := b.ib.Prune(context.Background(), b.db.SQL, 0)
	if err == nil || err.Error() != "inbox: prune: olderThan must be positive, got 0s" {
		t.Fatalf("Prune(0) = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.ib.Prune(ctx, b.db.SQL, time.Nanosecond); !errors.Is(err, context.Canceled) {
		t.Fatalf("Prune on a canceled context = %v", err)
	}
	if n := count(t, b.db.SQL, `SELECT count(*) FROM inbox`); n != 1 {
		t.Fatalf("rows left = %d, want 1", n)
	}
}

func TestConcurrentPrunersDeleteEachRowOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.db.SQL.Exec(`INSERT INTO inbox (consumer, event_id, processed_at)
		SELECT 'c', gen_random_uuid(), now() - interval '2 days' FROM generate_series(1, 5000)`); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{Table: txoutbox.Table{Schema: b.db.Schema}, PruneBatch: 100})
	if err != nil {
		t.Fatal(err)
	}
	counts := make(chan int64, 3)
	for range 3 {
		go func() {
			n, err := ib.Prune(context.Background(), b.db.SQL, time.Hour)
			if err != nil {
				t.Error(err)
			}
			counts <- n
		}()
	}
	var total int64
	for range 3 {
		total += <-counts
	}
	if total != 5000 || count(t, b.db.SQL, `SELECT count(*) FROM inbox`) != 0 {
		t.Fatalf("three pruners deleted %d rows in total, want 5000 and an empty table", total)
	}
}
