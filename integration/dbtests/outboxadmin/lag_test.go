package outboxadmin_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin"
)

// One lag everywhere: the age of the oldest unpublished event by
// created_at, also when created_at is not in id order (an application sets
// Event.CreatedAt, clocks skew). The headline reads the same row as the
// topics.
func TestLagIsTheOldestCreatedAt(t *testing.T) {
	t.Parallel()
	db, adm, _ := setup(t, outboxadmin.Config{})
	ctx := context.Background()
	for i := range 3 {
		if _, err := db.SQL.Exec(`INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, created_at)
VALUES (gen_random_uuid(), 'orders', $1, 't', '{}', now() - make_interval(mins => $2))`, "a"+string(rune('0'+i)), []int{34, 5, 3 * 24 * 60}[i]); err != nil {
			t.Fatal(err)
		}
	}
	const want = 3 * 24 * time.Hour
	near := func(what string, got time.Duration) {
		t.Helper()
		if got < want || got > want+time.Minute {
			t.Errorf("%s lag = %s, want about %s (the oldest by created_at, not the lowest id's 34m)", what, got, want)
		}
	}
	lag, err := adm.Lag(ctx)
	if err != nil {
		t.Fatal(err)
	}
	near("Admin.Lag", lag)
	st, err := adm.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	near("Status", st.Lag)
	if len(st.Topics) != 1 {
		t.Fatalf("topics = %+v", st.Topics)
	}
	near("Status.Topics[orders]", st.Topics[0].Lag)
	snap, err := adm.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	near("Snapshot", snap.Lag)
	ts, err := adm.TopicSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	near("TopicSnapshot", ts.Lag)
	if ts.Backlog != 3 || len(ts.Topics) != 1 || ts.Topics[0].Backlog != 3 || ts.LastID != 3 {
		t.Errorf("TopicSnapshot = %+v, want a backlog of 3 in one topic, last id 3", ts)
	}
	stats, err := txoutbox.ReadStats(ctx, db.SQL, db.Table())
	if err != nil {
		t.Fatal(err)
	}
	near("txoutbox.ReadStats (the relay's health check)", stats.Lag)
}

// The lag index serves the lag in a few buffers whatever the backlog:
// the same at 2,000 and 20,000 unpublished rows, generic plan included.
func TestLagReadsOneIndexEntry(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	names, err := outboxsql.NamesFor(db.Schema, "outbox")
	if err != nil {
		t.Fatal(err)
	}
	query := names.Render(outboxsql.StatsLag)
	buffers := func(rows int) int {
		t.Helper()
		if _, err := db.SQL.Exec(`INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, created_at)
SELECT gen_random_uuid(), 'orders', 'a' || (g % 97), 't', '{}', now() - (g % 1000) * interval '1 second' - random() * interval '1 hour'
FROM generate_series(1, $1) g`, rows); err != nil {
			t.Fatal(err)
		}
		// As many scheduled for next week, created before every other row:
		// not lag, and not read (schema version 7's due index).
		if _, err := db.SQL.Exec(`INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, created_at, not_before, retry_at)
SELECT gen_random_uuid(), 'orders', 's' || g, 't', '{}', now() - interval '1 day', now() + interval '7 days', now() + interval '7 days'
FROM generate_series(1, $1) g`, rows); err != nil {
			t.Fatal(err)
		}
		var oldest time.Time
		if err := db.SQL.QueryRow(query).Scan(&oldest, new(time.Time)); err != nil || time.Since(oldest) > 2*time.Hour {
			t.Fatalf("lag statement: oldest due %v, %v; want within the unscheduled rows' two hours, not the scheduled rows' day", oldest, err)
		}
		if _, err := db.SQL.Exec(`VACUUM ANALYZE outbox`); err != nil {
			t.Fatal(err)
		}
		conn, err := db.SQL.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var plan string
		for _, stmt := range []string{`SET plan_cache_mode = force_generic_plan`, `PREPARE lag_` + strconv.Itoa(rows) + ` AS ` + query} {
			if _, err := conn.ExecContext(context.Background(), stmt); err != nil {
				t.Fatal(err)
			}
		}
		if err := conn.QueryRowContext(context.Background(), `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE lag_`+strconv.Itoa(rows)).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan, `"outbox_due_idx"`) {
			t.Fatalf("lag plan at %d rows does not use outbox_due_idx:\n%s", rows, plan)
		}
		var p []struct {
			Plan struct {
				Hit  int `json:"Shared Hit Blocks"`
				Read int `json:"Shared Read Blocks"`
			} `json:"Plan"`
		}
		if err := json.Unmarshal([]byte(plan), &p); err != nil || len(p) != 1 {
			t.Fatalf("plan %s: %v", plan, err)
		}
		return p[0].Plan.Hit + p[0].Plan.Read
	}
	small := buffers(2_000)
	large := buffers(18_000) // 20,000 in all
	t.Logf("lag statement buffers: %d at 2,000 unpublished rows, %d at 20,000", small, large)
	if large > small+1 || large > 8 {
		t.Errorf("lag statement read %d buffers at 20,000 rows and %d at 2,000: want a few, the same at both", large, small)
	}
}

// Scheduled events are counted apart everywhere the figures are shown, and
// are neither backlog nor lag: two due rows of "orders" and three of
// "reminders" scheduled for tomorrow, written (created_at) a day ago.
func TestScheduledEventsAreNotBacklogOrLag(t *testing.T) {
	t.Parallel()
	db, adm, w := setup(t, outboxadmin.Config{})
	ctx := context.Background()
	tomorrow := time.Now().Add(24 * time.Hour).Truncate(time.Microsecond)
	var events []txoutbox.Event
	for i := range 5 {
		e, err := txoutbox.NewEvent("orders", "order", strconv.Itoa(i), "order.placed", i)
		if err != nil {
			t.Fatal(err)
		}
		e.CreatedAt = time.Now().Add(-time.Minute)
		if i >= 2 {
			e.Topic, e.NotBefore, e.CreatedAt = "reminders", tomorrow.Add(time.Duration(i)*time.Hour), time.Now().Add(-24*time.Hour)
		}
		events = append(events, e)
	}
	testkit.Commit(t, ctx, db.SQL, w, events...)
	check := func(what string, s txoutbox.Stats, topics bool) {
		t.Helper()
		if s.Backlog != 2 || s.Scheduled != 3 || s.Lag < time.Minute || s.Lag > 2*time.Minute {
			t.Errorf("%s: backlog %d, scheduled %d, lag %s; want 2, 3 and about a minute (not the scheduled rows' day)", what, s.Backlog, s.Scheduled, s.Lag)
		}
		if !topics {
			if want := tomorrow.Add(2 * time.Hour); !s.NextScheduled.Equal(want) {
				t.Errorf("%s: next scheduled %v, want %v", what, s.NextScheduled, want)
			}
			return
		}
		if len(s.Topics) != 2 || s.Topics[0].Topic != "orders" || s.Topics[0].Backlog != 2 || s.Topics[0].Scheduled != 0 ||
			s.Topics[1].Topic != "reminders" || s.Topics[1].Backlog != 0 || s.Topics[1].Scheduled != 3 || s.Topics[1].Lag != 0 {
			t.Errorf("%s: topics %+v; want orders with backlog 2, reminders with 3 scheduled, no backlog and no lag", what, s.Topics)
		}
	}
	st, err := adm.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("Status", st.Stats, true)
	snap, err := adm.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("Snapshot", snap.Stats, false)
	ts, err := adm.TopicSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("TopicSnapshot", ts.Stats, true)
	rs, err := txoutbox.ReadStats(ctx, db.SQL, db.Table())
	if err != nil {
		t.Fatal(err)
	}
	check("txoutbox.ReadStats", rs, false)
	later := snap
	later.At = snap.At.Add(time.Second)
	later.LastID += 2
	later.Scheduled += 2 // two more scheduled, none published
	if r := outboxadmin.PublishRate(snap, later); r != 0 {
		t.Errorf("publish rate %v with only scheduled events written, want 0", r)
	}
}
