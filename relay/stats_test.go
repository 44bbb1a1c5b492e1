package relay

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

func TestSpacing(t *testing.T) {
	for _, c := range []struct{ took, want time.Duration }{
		{time.Millisecond, 10 * time.Second},       // quick: every StatsInterval
		{20 * time.Millisecond, time.Second},       // under statsQuick: every StatsInterval, however short
		{200 * time.Millisecond, 20 * time.Second}, // statsSpacing × took
		{10 * time.Second, 1000 * time.Second},     // cut short by StatementTimeout
	} {
		interval := 10 * time.Second
		if c.want == time.Second {
			interval = time.Second
		}
		if got := spacing(interval, c.took); got != c.want {
			t.Errorf("spacing(%s, %s) = %s, want %s", interval, c.took, got, c.want)
		}
	}
}

// TestPacedRunsEveryIntervalWhileQuick: a quick reading runs on every
// tick, not every other one.
// In a synctest bubble the second passes on a fake clock, so the count is
// exact however loaded the machine: the first reading at once, the second
// at a random point of the first interval, then one every 20ms.
func TestPacedRunsEveryIntervalWhileQuick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		runs := 0
		paced(ctx, 20*time.Millisecond, func(context.Context) time.Duration { runs++; return 0 })
		if runs < 50 || runs > 51 {
			t.Errorf("%d runs in a second at 20ms, want 50 or 51", runs)
		}
	})
}

// A slow reading spaces the next ones out: statsSpacing times as long as
// it took, from its start, the second one included.
func TestPacedSpacesOutASlowReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const took = 50 * time.Millisecond // over statsQuick
		gap := statsSpacing * took
		ctx, cancel := context.WithTimeout(context.Background(), 3*gap+gap/2)
		defer cancel()
		var starts []time.Duration
		begin := time.Now()
		paced(ctx, 20*time.Millisecond, func(context.Context) time.Duration {
			starts = append(starts, time.Since(begin))
			time.Sleep(took)
			return took
		})
		if want := []time.Duration{0, gap, 2 * gap, 3 * gap}; !slices.Equal(starts, want) {
			t.Errorf("readings at %v, want %v", starts, want)
		}
	})
}

// statsRelay is a relay whose stats are read every 20ms, and a function
// that starts its stats loop until the test ends.
func statsRelay(t *testing.T, b *internalBundle) (*Relay, func()) {
	t.Helper()
	r := b.newRelayWith(t, nopPublisher{}, Config{Table: b.db.Table(), ID: "stats", Logger: slog.New(slog.DiscardHandler),
		// A reading that waits on a lock the test holds waits, rather than
		// locking the table out (which stops every reading) after the
		// default 200ms.
		StatsInterval: 20 * time.Millisecond, LockTimeout: StatementTimeoutDefault})
	return r, func() {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); r.sampler.run(ctx) }()
		t.Cleanup(func() { cancel(); wg.Wait() })
	}
}

// sample is what the gauges would report; -1 for a gauge not set yet.
func (m *metrics) sample() (lag time.Duration, backlog, dead int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	lag, backlog, dead = -1, -1, -1
	if m.lagSample != nil {
		lag = *m.lagSample
	}
	if m.backlogCount != nil {
		backlog = *m.backlogCount
	}
	if m.deadCount != nil {
		dead = *m.deadCount
	}
	return lag, backlog, dead
}

// waitGauges polls the gauges until ok says they are as wanted. It waits
// up to 30s: a count that took 25ms or more (its transaction's round trips
// on a machine the whole suite loads) is run again only after statsSpacing
// times as long, as it is meant to be.
func waitGauges(t *testing.T, r *Relay, what string, ok func(lag time.Duration, backlog, dead int64) bool) {
	t.Helper()
	var lag time.Duration
	var backlog, dead int64
	if !testkit.Eventually(30*time.Second, func() bool {
		lag, backlog, dead = r.met.sample()
		return ok(lag, backlog, dead)
	}) {
		t.Fatalf("gauges: lag %s, backlog %d, dead %d; want %s", lag, backlog, dead, what)
	}
}

// TestStatsGaugesFollowTheTable: the gauges follow rows written, dead and
// published while the loop runs.
func TestStatsGaugesFollowTheTable(t *testing.T) {
	b := setupInternal(t)
	b.write(t, 3, "a")
	b.exec(t, `UPDATE outbox SET state = 'dead' WHERE id = (SELECT min(id) FROM outbox)`)
	r, start := statsRelay(t, b)
	start()
	waitGauges(t, r, "a lag, backlog 2, dead 1", func(lag time.Duration, backlog, dead int64) bool {
		return lag > 0 && backlog == 2 && dead == 1
	})
	b.write(t, 2, "b")
	waitGauges(t, r, "backlog 4", func(_ time.Duration, backlog, _ int64) bool { return backlog == 4 })
	b.exec(t, `UPDATE outbox SET state = 'published', published_at = now() WHERE state = 'pending'`)
	waitGauges(t, r, "no lag, backlog 0, dead 1", func(lag time.Duration, backlog, dead int64) bool {
		return lag == 0 && backlog == 0 && dead == 1
	})
}

// TestStatsCountLessOftenWhenSlow: a count that takes 200ms is not run
// again for statsSpacing times as long (20s: far more than ten lag reads
// take on a loaded machine), and a count that has not ended does not
// hold up the lag. The statements are replaced by ones that number their
// runs; the dead count waits for an advisory lock the test holds until
// the lag has been read ten times after the first count.
func TestStatsCountLessOftenWhenSlow(t *testing.T) {
	b := setupInternal(t)
	b.exec(t, `CREATE SEQUENCE counts`)
	b.exec(t, `CREATE SEQUENCE lags`)
	ctx := context.Background()
	hold, err := b.db.SQL.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	var key int64
	if err := hold.QueryRowContext(ctx, `SELECT hashtext($1)::bigint`, b.db.Schema).Scan(&key); err != nil {
		t.Fatal(err)
	}
	if _, err := hold.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		t.Fatal(err)
	}
	r, start := statsRelay(t, b)
	// $1 is the counts' cap (outboxsql.CountArgs).
	r.sql.statsBacklog = `SELECT nextval('counts'), 0::bigint FROM pg_sleep(0.2) WHERE $1::int > 0`
	r.sql.statsDead = fmt.Sprintf(`SELECT 0::bigint FROM (SELECT pg_advisory_xact_lock_shared(%d)) l WHERE $1::int > 0`, key)
	r.sql.statsLag = `SELECT l, l, now() FROM (SELECT now() - make_interval(secs => nextval('lags')) AS l) s WHERE $1::int > 0`
	start()
	var first time.Duration // the lag's reading when the first count has ended
	testkit.WaitFor(t, 30*time.Second, "the first count", func() bool {
		var counts int64
		first, counts, _ = r.met.sample()
		return counts >= 1
	})
	testkit.WaitFor(t, 30*time.Second, "the lag read ten times more while the dead count waits", func() bool {
		lag, _, _ := r.met.sample()
		return lag >= first+10*time.Second
	})
	lag, counts, dead := r.met.sample()
	if counts != 1 {
		t.Errorf("the backlog was counted %d times while the lag was read %.0f times at 20ms, each count taking 200ms; want once", counts, (lag - first).Seconds())
	}
	if dead != -1 {
		t.Errorf("dead gauge %d before its count ended", dead)
	}
	if _, err := hold.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "the dead count once the lock is gone", func() bool {
		_, _, dead := r.met.sample()
		return dead == 0
	})
}

// TestStatsEmptyTableClearsASlowBacklogCount: once no row is unpublished,
// the lag's reading sets the backlog gauge to 0, whatever the last count,
// which waits statsSpacing times its duration, said. The count is
// replaced by one that says 7 after 50ms, and the lag's statement by one
// that sees an unpublished row until that count has run, none after.
func TestStatsEmptyTableClearsASlowBacklogCount(t *testing.T) {
	b := setupInternal(t)
	b.exec(t, `CREATE SEQUENCE counts`)
	r, start := statsRelay(t, b)
	r.sql.statsBacklog = `SELECT 6 + nextval('counts'), 0::bigint FROM pg_sleep(0.05) WHERE $1::int > 0`
	r.sql.statsLag = `SELECT l, l, now() FROM (SELECT CASE WHEN is_called THEN NULL ELSE now() - interval '1 hour' END AS l FROM counts) s WHERE $1::int > 0`
	start()
	waitGauges(t, r, "backlog 0 once the table is empty", func(lag time.Duration, backlog, _ int64) bool {
		return lag == 0 && backlog == 0
	})
}

// TestStatsGaugesKeepScheduledRowsApart: rows scheduled for later are
// counted by their own gauge, not in the backlog, and are not lag; once due
// they are backlog, and lag from their NotBefore.
func TestStatsGaugesKeepScheduledRowsApart(t *testing.T) {
	b := setupInternal(t)
	b.write(t, 2, "a")
	b.exec(t, `UPDATE outbox SET created_at = now() - interval '1 hour'`)
	b.writeAt(t, time.Now().Add(time.Hour), "later-1", "later-2", "later-3")
	r, start := statsRelay(t, b)
	start()
	waitGauges(t, r, "lag about an hour, backlog 2", func(lag time.Duration, backlog, _ int64) bool {
		return lag > 59*time.Minute && backlog == 2
	})
	if n := r.met.scheduledSample(); n != 3 {
		t.Fatalf("scheduled gauge %d, want 3", n)
	}
	// Only scheduled rows are left: no lag, no backlog.
	b.exec(t, `UPDATE outbox SET state = 'published', published_at = now() WHERE not_before IS NULL`)
	waitGauges(t, r, "no lag, backlog 0", func(lag time.Duration, backlog, _ int64) bool { return lag == 0 && backlog == 0 })
	if n := r.met.scheduledSample(); n != 3 {
		t.Fatalf("scheduled gauge %d with only scheduled rows left, want 3", n)
	}
	// Their time came ten minutes ago (created two hours ago): backlog 3,
	// lag from the NotBefore.
	b.exec(t, `UPDATE outbox SET created_at = now() - interval '2 hours', not_before = now() - interval '10 minutes',
        retry_at = now() - interval '10 minutes' WHERE not_before IS NOT NULL`)
	waitGauges(t, r, "lag about 10 minutes, backlog 3", func(lag time.Duration, backlog, _ int64) bool {
		return lag > 9*time.Minute && lag < 11*time.Minute && backlog == 3
	})
	if n := r.met.scheduledSample(); n != 0 {
		t.Fatalf("scheduled gauge %d once due, want 0", n)
	}
}

// scheduledSample is the scheduled gauge's figure, -1 before it is set.
func (m *metrics) scheduledSample() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.scheduledCount == nil {
		return -1
	}
	return *m.scheduledCount
}

// dueLagNow is the due lag gauge's figure, -1 before it is set.
func (m *metrics) dueLagNow() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dueLagSample == nil {
		return -1
	}
	return *m.dueLagSample
}

// TestStatsDueLagLeavesOutRowsHeldBehindAScheduledOne: a row held behind
// a scheduled row of its aggregate is lag, not due lag; a row free to
// publish is both.
func TestStatsDueLagLeavesOutRowsHeldBehindAScheduledOne(t *testing.T) {
	b := setupInternal(t)
	b.writeAt(t, time.Now().Add(time.Hour), "a")
	b.write(t, 1, "a")
	b.exec(t, `UPDATE outbox SET created_at = now() - interval '1 hour' WHERE not_before IS NULL`)
	r, start := statsRelay(t, b)
	start()
	waitGauges(t, r, "lag about an hour", func(lag time.Duration, _, _ int64) bool { return lag > 59*time.Minute })
	if d := r.met.dueLagNow(); d != 0 {
		t.Fatalf("due lag gauge %s with only a held row late, want 0", d)
	}
	b.write(t, 1, "b")
	b.exec(t, `UPDATE outbox SET created_at = now() - interval '10 minutes' WHERE aggregate_id = 'b'`)
	// As long as waitGauges: a reading spaced out under the suite's load.
	if !testkit.Eventually(30*time.Second, func() bool { return r.met.dueLagNow() > 9*time.Minute }) {
		t.Fatalf("due lag gauge %s with a row free to publish 10m late, want about 10m", r.met.dueLagNow())
	}
}
