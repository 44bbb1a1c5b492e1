package txoutbox_test

import (
	"context"
	"testing"
	"time"

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

// An event held behind a scheduled event of its aggregate is lag, and not
// due lag: it waits by design, and once let go counts from the scheduled
// event's time until that one is published. A failed event in backoff is
// both.
func TestDueLagLeavesOutEventsHeldBehindAScheduledOne(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	tbl := db.Table().String()
	ctx := context.Background()
	exec := func(q string) {
		t.Helper()
		if _, err := db.SQL.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	read := func() txoutbox.Stats {
		t.Helper()
		s, err := txoutbox.ReadStats(ctx, db.SQL, db.Table())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// A reminder an hour ahead, and an event of its aggregate written an
	// hour ago behind it.
	exec(`INSERT INTO ` + tbl + ` (event_id, topic, aggregate_id, event_type, payload, created_at, not_before, retry_at, next_attempt_at)
		VALUES (gen_random_uuid(), 'orders', 'o-1', 'reminder', '\x', now() - interval '2 hours', now() + interval '1 hour', now() + interval '1 hour', now() + interval '1 hour')`)
	exec(`INSERT INTO ` + tbl + ` (event_id, topic, aggregate_id, event_type, payload, created_at)
		VALUES (gen_random_uuid(), 'orders', 'o-1', 'paid', '\x', now() - interval '1 hour')`)
	if s := read(); s.Lag < 59*time.Minute || s.DueLag != 0 || s.Backlog != 1 || s.Scheduled != 1 {
		t.Fatalf("lag %s, due lag %s, backlog %d, scheduled %d; want about 1h, 0, 1, 1", s.Lag, s.DueLag, s.Backlog, s.Scheduled)
	}
	// An event free to publish, written ten minutes ago: due lag.
	exec(`INSERT INTO ` + tbl + ` (event_id, topic, aggregate_id, event_type, payload, created_at)
		VALUES (gen_random_uuid(), 'orders', 'o-2', 'placed', '\x', now() - interval '10 minutes')`)
	if s := read(); s.Lag < 59*time.Minute || s.DueLag < 9*time.Minute || s.DueLag > 11*time.Minute {
		t.Fatalf("lag %s, due lag %s; want about 1h and 10m", s.Lag, s.DueLag)
	}
	// A failed event in backoff, written half an hour ago: a failure is
	// due lag.
	exec(`INSERT INTO ` + tbl + ` (event_id, topic, aggregate_id, event_type, payload, created_at, attempts, retry_at, next_attempt_at)
		VALUES (gen_random_uuid(), 'orders', 'o-3', 'placed', '\x', now() - interval '30 minutes', 3, now() + interval '1 minute', now() + interval '1 minute')`)
	if s := read(); s.DueLag < 29*time.Minute || s.DueLag > 31*time.Minute {
		t.Fatalf("due lag %s with a failed event 30m old; want about 30m", s.DueLag)
	}
	// The others published, the reminder came due a minute ago: the event
	// behind it is let go, and counts from the reminder's time, not from
	// its own creation; once the reminder is published, from its own.
	exec(`UPDATE ` + tbl + ` SET state = 'published', published_at = now() WHERE aggregate_id IN ('o-2', 'o-3')`)
	exec(`UPDATE ` + tbl + ` SET not_before = now() - interval '1 minute', retry_at = now() - interval '1 minute' WHERE event_type = 'reminder'`)
	if s := read(); s.Lag < 59*time.Minute || s.DueLag < 50*time.Second || s.DueLag > 2*time.Minute {
		t.Fatalf("lag %s, due lag %s once the reminder is due; want about 1h and 1m", s.Lag, s.DueLag)
	}
	exec(`UPDATE ` + tbl + ` SET state = 'published', published_at = now() WHERE event_type = 'reminder'`)
	if s := read(); s.DueLag < 59*time.Minute {
		t.Fatalf("due lag %s once the reminder is published; want the event's hour", s.DueLag)
	}
}
