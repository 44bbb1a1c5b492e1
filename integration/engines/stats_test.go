package engines_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// near fails unless got is within tolerance of want.
func near(t *testing.T, what string, got, want, tolerance time.Duration) {
	t.Helper()
	if got < want-tolerance || got > want+tolerance {
		t.Errorf("%s = %s, want %s ± %s", what, got, want, tolerance)
	}
}

func TestReadStatsCountsAndLag(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		ctx := context.Background()
		db := testkit.NewOutboxOn(t, e)
		now := time.Now()
		old := event("a", 1)
		old.CreatedAt = now.Add(-time.Hour)
		later := event("c", 3)
		later.NotBefore = now.Add(2 * time.Hour)
		testkit.Commit(t, ctx, db.SQL, db.Writer(t), old, event("b", 2), later, event("d", 4))
		if _, err := db.SQL.ExecContext(ctx, "UPDATE outbox SET state = 'dead', last_error = 'refused' WHERE aggregate_id = 'd'"); err != nil {
			t.Fatal(err)
		}

		s, err := txoutbox.ReadStats(ctx, db.SQL, db.Table())
		if err != nil {
			t.Fatal(err)
		}
		if s.Backlog != 2 || s.Scheduled != 1 || s.Dead != 1 || s.BacklogEstimated || s.ScheduledEstimated || s.DeadEstimated {
			t.Errorf("ReadStats = backlog %d, scheduled %d, dead %d (estimated %t %t %t), want 2, 1, 1, exact",
				s.Backlog, s.Scheduled, s.Dead, s.BacklogEstimated, s.ScheduledEstimated, s.DeadEstimated)
		}
		near(t, "Lag", s.Lag, time.Hour, time.Minute)
		near(t, "DueLag", s.DueLag, time.Hour, time.Minute)
		near(t, "NextScheduled - now", s.NextScheduled.Sub(now), 2*time.Hour, time.Minute)

		// Published, the due events leave no lag; the scheduled one stays.
		if _, err := db.SQL.ExecContext(ctx, "UPDATE outbox SET state = 'published', published_at = created_at WHERE aggregate_id IN ('a', 'b')"); err != nil {
			t.Fatal(err)
		}
		s, err = txoutbox.ReadStats(ctx, db.SQL, db.Table())
		if err != nil {
			t.Fatal(err)
		}
		if s.Backlog != 0 || s.Scheduled != 1 || s.Lag != 0 || s.DueLag != 0 {
			t.Errorf("after publishing the due events: backlog %d, scheduled %d, lag %s, due lag %s; want 0, 1, 0, 0",
				s.Backlog, s.Scheduled, s.Lag, s.DueLag)
		}
	})
}

func TestReadTopicStatsOnMySQLIsUnsupported(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		ctx := context.Background()
		db := testkit.NewOutboxOn(t, e)
		testkit.Commit(t, ctx, db.SQL, db.Writer(t), event("a", 1))
		s, err := txoutbox.ReadTopicStats(ctx, db.SQL, db.Table())
		if e.Dialect == txoutbox.MySQL {
			if !errors.Is(err, errors.ErrUnsupported) {
				t.Fatalf("ReadTopicStats on MySQL: %v, want an error matching errors.ErrUnsupported", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Topics) != 1 || s.Topics[0].Topic != "orders" || s.Topics[0].Backlog != 1 {
			t.Fatalf("ReadTopicStats = %+v, want orders with a backlog of 1", s.Topics)
		}
	})
}
