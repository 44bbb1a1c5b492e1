package relaye2e

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
)

func TestReadStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	s, err := txoutbox.ReadStats(ctx, b.db.SQL, b.db.Table())
	if err != nil || s.Backlog != 0 || s.Lag != 0 || s.Dead != 0 {
		t.Fatalf("empty outbox: %+v, %v", s, err)
	}
	b.write(t, "orders", 10, 2)
	b.write(t, "payments", 4, 2)
	if _, err := b.db.SQL.Exec(`UPDATE outbox SET created_at = now() - interval '90 seconds' WHERE id = 1;
		UPDATE outbox SET state = 'dead' WHERE id IN (2, 3);
		UPDATE outbox SET state = 'published', published_at = now() WHERE id = 4`); err != nil {
		t.Fatal(err)
	}
	s, err = txoutbox.ReadTopicStats(ctx, b.db.SQL, b.db.Table())
	if err != nil {
		t.Fatal(err)
	}
	if s.Backlog != 11 || s.Dead != 2 || s.Lag < 90*time.Second || s.Lag > 120*time.Second {
		t.Fatalf("stats = %+v, want backlog 11, dead 2, lag about 90s", s)
	}
	if len(s.Topics) != 2 || s.Topics[0].Topic != "orders" || s.Topics[0].Backlog != 7 || s.Topics[0].Dead != 2 ||
		s.Topics[0].Lag < 90*time.Second || s.Topics[1].Backlog != 4 || s.Topics[1].Lag > 30*time.Second {
		t.Fatalf("topic stats = %+v", s.Topics)
	}
}
