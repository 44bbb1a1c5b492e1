package outboxsql_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// OldestDue walks at most its cap of held rows: past it, it is the last
// held row's time, which no row not held came due before, so the due lag
// shown is too high rather than too low; below it, the row not held.
func TestOldestDueIsAnUpperBoundPastItsCap(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	n, err := outboxsql.NamesFor(db.Schema, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, not_before, retry_at, next_attempt_at)
		 VALUES (gen_random_uuid(), 't', 'h', 'e', '\x00', now() + interval '1 hour', now() + interval '1 hour', now() + interval '1 hour')`,
		// Five held rows, an hour old and older by a minute each, then a free one ten minutes old.
		`INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, created_at)
		 SELECT gen_random_uuid(), 't', 'h', 'e', '\x00', now() - interval '60 minutes' - (5 - g) * interval '1 minute' FROM generate_series(1, 5) g`,
		`INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, created_at)
		 VALUES (gen_random_uuid(), 't', 'f', 'e', '\x00', now() - interval '10 minutes')`,
	} {
		if _, err := db.SQL.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	dueLag := func(cap int) time.Duration {
		t.Helper()
		var (
			oldest, due sql.NullTime
			now         time.Time
		)
		if err := db.SQL.QueryRow(n.Render(outboxsql.StatsLags), outboxsql.CountArgs{Cap: cap}.Args()...).Scan(&oldest, &due, &now); err != nil {
			t.Fatal(err)
		}
		return now.Sub(due.Time).Round(time.Minute)
	}
	if got := dueLag(100); got != 10*time.Minute {
		t.Errorf("due lag %s with the cap past the held rows, want the free row's 10m", got)
	}
	if got := dueLag(3); got != 62*time.Minute {
		t.Errorf("due lag %s with a cap of 3 held rows, want the third one's 62m", got)
	}
}
