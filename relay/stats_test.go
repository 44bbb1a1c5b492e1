package relay

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

func TestCountSpacing(t *testing.T) {
	for _, c := range []struct{ took, want time.Duration }{
		{time.Millisecond, 10 * time.Second},       // cheap: every StatsInterval
		{200 * time.Millisecond, 20 * time.Second}, // statsCountSpacing × took
		{10 * time.Second, 1000 * time.Second},     // cut short by StatementTimeout
	} {
		if got := countSpacing(10*time.Second, c.took); got != c.want {
			t.Errorf("countSpacing(10s, %s) = %s, want %s", c.took, got, c.want)
		}
	}
}

// statsRelay is a relay whose stats loop runs every 20ms, and a function
// that runs the loop for d.
func statsRelay(t *testing.T, b *internalBundle) (*Relay, func(d time.Duration)) {
	t.Helper()
	r, err := New(b.db.SQL, nopPublisher{}, Config{Table: b.db.Table(), ID: "stats", Logger: slog.New(slog.DiscardHandler),
		StatsInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return r, func(d time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); r.statsLoop(ctx) }()
		wg.Wait()
	}
}

func (m *metrics) sample() (lag time.Duration, backlog, dead int64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lagSample == nil || m.backlogCount == nil {
		return 0, 0, 0, false
	}
	return *m.lagSample, *m.backlogCount, *m.deadCount, true
}

// TestStatsGaugesFollowTheTable: while counting is quick, the backlog and
// dead gauges are counted again every StatsInterval.
func TestStatsGaugesFollowTheTable(t *testing.T) {
	b := setupInternal(t)
	b.write(t, 3, "a")
	b.exec(t, `UPDATE outbox SET state = 'dead' WHERE id = (SELECT min(id) FROM outbox)`)
	r, run := statsRelay(t, b)
	run(200 * time.Millisecond)
	if lag, backlog, dead, ok := r.met.sample(); !ok || backlog != 2 || dead != 1 || lag <= 0 {
		t.Fatalf("gauges: lag %s, backlog %d, dead %d (set: %v), want a lag, 2 and 1", lag, backlog, dead, ok)
	}
	b.write(t, 2, "b")
	run(200 * time.Millisecond)
	if _, backlog, _, _ := r.met.sample(); backlog != 4 {
		t.Fatalf("backlog gauge %d after two more rows, want 4", backlog)
	}
}

// TestStatsCountLessOftenWhenSlow: a count that takes 50ms is not run
// again for statsCountSpacing times as long, while the lag is still read
// every StatsInterval. The statements are replaced by ones that number
// their runs.
func TestStatsCountLessOftenWhenSlow(t *testing.T) {
	b := setupInternal(t)
	b.exec(t, `CREATE SEQUENCE counts`)
	b.exec(t, `CREATE SEQUENCE lags`)
	r, run := statsRelay(t, b)
	r.sql.statsCounts = `SELECT nextval('counts'), 0::bigint FROM pg_sleep(0.05)`
	r.sql.statsLag = `SELECT now() - make_interval(secs => nextval('lags')), now()`
	run(time.Second)
	lag, counts, _, ok := r.met.sample()
	if !ok {
		t.Fatal("gauges not set")
	}
	if counts != 1 {
		t.Errorf("the backlog was counted %d times in a second, each count taking 50ms; want once", counts)
	}
	if lag < 10*time.Second {
		t.Errorf("the lag was read %d times in a second with StatsInterval 20ms; want 10 or more", int(lag.Seconds()))
	}
}
