package txoutbox_test

import (
	"context"
	"testing"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// A topic whose oldest rows are scheduled shows its due backlog and lag
// all the same: its window reads the due rows first (schema version 7's
// topic index is by due time).
func TestTopicStatsShowTheBacklogBehindScheduledRows(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	tbl := db.Table().String()
	ctx := context.Background()
	// 12,000 rows scheduled for tomorrow, written two hours ago.
	if _, err := db.SQL.ExecContext(ctx, `INSERT INTO `+tbl+` (event_id, topic, aggregate_id, event_type, payload, created_at, not_before, retry_at, next_attempt_at)
		SELECT gen_random_uuid(), 'orders', 's'||g, 'x', '\x', now() - interval '2 hours', now() + interval '1 day', now() + interval '1 day', now() + interval '1 day'
		FROM generate_series(1, 12000) g`); err != nil {
		t.Fatal(err)
	}
	// 5,000 due rows written an hour ago: a stuck relay.
	if _, err := db.SQL.ExecContext(ctx, `INSERT INTO `+tbl+` (event_id, topic, aggregate_id, event_type, payload, created_at)
		SELECT gen_random_uuid(), 'orders', 'd'||g, 'x', '\x', now() - interval '1 hour' FROM generate_series(1, 5000) g`); err != nil {
		t.Fatal(err)
	}
	s, err := txoutbox.ReadTopicStats(ctx, db.SQL, db.Table())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("total: backlog %d est %v lag %v scheduled %d", s.Backlog, s.BacklogEstimated, s.Lag, s.Scheduled)
	for _, tp := range s.Topics {
		t.Logf("topic %s: backlog %d atLeast %v lag %v scheduled %d", tp.Topic, tp.Backlog, tp.BacklogAtLeast, tp.Lag, tp.Scheduled)
		if tp.Backlog < 5000 || tp.Lag < 59*60e9 {
			t.Errorf("topic %s hides its due backlog/lag", tp.Topic)
		}
	}
}

// Beyond the exact counts' cap, scheduled rows are estimated from the
// scheduled index's statistics, so the backlog (the unpublished rows less
// the scheduled ones) stays near the due rows, marked as an estimate.
func TestBacklogEstimateBesideManyScheduledRows(t *testing.T) {
	testkit.Long(t, "the backlog estimate beside rows past the count caps")
	t.Parallel()
	db := testkit.NewOutbox(t)
	tbl := db.Table().String()
	ctx := context.Background()
	if _, err := db.SQL.ExecContext(ctx, `INSERT INTO `+tbl+` (event_id, topic, aggregate_id, event_type, payload, not_before, retry_at, next_attempt_at)
		SELECT gen_random_uuid(), 'orders', 's'||g, 'x', '\x', now() + interval '1 day', now() + interval '1 day', now() + interval '1 day'
		FROM generate_series(1, 150000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL.ExecContext(ctx, `INSERT INTO `+tbl+` (event_id, topic, aggregate_id, event_type, payload)
		SELECT gen_random_uuid(), 'orders', 'd'||g, 'x', '\x' FROM generate_series(1, 10) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL.ExecContext(ctx, `ANALYZE `+tbl); err != nil { // as autovacuum would
		t.Fatal(err)
	}
	s, err := txoutbox.ReadStats(ctx, db.SQL, db.Table())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("backlog %d estimated %v; scheduled %d estimated %v", s.Backlog, s.BacklogEstimated, s.Scheduled, s.ScheduledEstimated)
	if s.Backlog > 1000 || !s.BacklogEstimated || !s.ScheduledEstimated || s.Scheduled < 140_000 || s.Scheduled > 160_000 {
		t.Errorf("backlog %d (estimated %v), scheduled %d (estimated %v); want about 10 and 150,000, both estimated",
			s.Backlog, s.BacklogEstimated, s.Scheduled, s.ScheduledEstimated)
	}
}
