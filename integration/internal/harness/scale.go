package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// The scale scenarios: the sizes and durations production brings (an
// outage of a quarter hour, tens of thousands of aggregates in backoff, a
// million dead letters, a backlog of ten million, a million events in one
// transaction), each with real relay processes. `go run ./integration/chaos
// -scale` runs them; each prints a line "scale: <name> key=value ...".
// The crash suite's Plans cover per-aggregate order under faults; these
// check what sizes break: stalls, dead healthy events, unbounded memory.

// LongOutage: the broker is away for outage while writers go on and
// relays restart under their own ids; nothing goes dead, and the backlog
// drains after. Size.Over should exceed outage.
func LongOutage(s Size, outage, restartEvery time.Duration) Plan {
	flags := DefaultRelayFlags()
	flags.BackoffMin, flags.BackoffMax = time.Second, 5*time.Minute
	var during int
	return Plan{
		Name: "long-outage", Relays: 3, FixedIDs: true, Flags: flags, Write: writeLoad(s), Drain: 10 * time.Minute,
		Fault: Mix(func(ctx context.Context, w *World) (int, error) {
			if !sleep(ctx, 20*time.Second) {
				return 0, ctx.Err()
			}
			if err := w.Broker.Stop(); err != nil {
				return 0, err
			}
			w.Env.Logf("long-outage: broker stopped for %s", outage)
			if !sleep(ctx, outage) {
				return 0, ctx.Err()
			}
			var err error
			if during, err = Backlog(ctx, w.Env); err != nil {
				return 0, err
			}
			if err := w.Broker.Start(ctx); err != nil {
				return 0, err
			}
			w.Env.Logf("long-outage: broker back, backlog %d", during)
			return len(w.Fleet.Live()), nil
		}, SameIDRestarts(5, restartEvery)),
		Check: func(_ context.Context, _ *World, res *Result) error {
			if during == 0 {
				return errors.New("long-outage: no backlog at the end of the outage")
			}
			if res.Dead != 0 {
				return fmt.Errorf("long-outage: dead=%d after a %s outage, want 0", res.Dead, outage)
			}
			return nil
		},
	}
}

// AsyncCrash is DBCrash with writers that commit with synchronous_commit =
// off: a commit acknowledged to a writer is lost in a crash if its WAL was
// not flushed, and no relay may have published it (phantom=0).
func AsyncCrash(s Size, crashes int, period time.Duration) Plan {
	p := DBCrash(s, crashes, period)
	p.Name = "async-crash"
	p.Write.AsyncCommit = true
	return p
}

// Scale is a scale scenario outside the Plan model: it sets up what it
// needs on env and returns its result line's fields, or an error for a
// broken promise.
type Scale struct {
	Name string
	// OwnCluster: as Plan.OwnCluster.
	OwnCluster bool
	// Alone: it compares throughputs or bounds a latency, so it runs with
	// no other scenario beside it.
	Alone bool
	Run   func(ctx context.Context, env *Env) (string, error)
}

// scaleInsert writes n outbox rows numbered from first, in one statement:
// aggregate prefix || (g % aggregates), in state with attempts, due after
// delay, with payloads of pad bytes.
const scaleInsert = `
INSERT INTO {{table}} (event_id, topic, aggregate_id, event_type, payload, state, attempts, next_attempt_at, retry_at, published_at, last_error)
SELECT gen_random_uuid(), $1, $2 || (g % $3), 'scale.event',
       convert_to('{"seq":' || g || ',"pad":"' || repeat('x', $9) || '"}', 'UTF8'), $4, $5,
       now() + $6::interval, CASE WHEN $5 > 0 AND $4 = 'pending' THEN now() + $6::interval ELSE '-infinity' END,
       CASE WHEN $4 = 'published' THEN now() END, CASE WHEN $5 > 0 THEN 'scale: failed before' END
FROM generate_series($7::bigint, $8::bigint) g`

// scaleInsertMySQL is scaleInsert on MySQL/MariaDB: the numbers come
// from a cross join of digits (testkit.MySQLNumbers), which both servers
// run, and the delay is in microseconds.
const scaleInsertMySQL = `
INSERT INTO {{table}} (event_id, topic, aggregate_id, event_type, payload, headers, created_at, state, attempts, retry_at, published_at, last_error)
SELECT UUID(), ?, CONCAT(?, g MOD ?), 'scale.event',
       CONCAT('{"seq":', g, ',"pad":"', REPEAT('x', ?), '"}'), '{}', UTC_TIMESTAMP(6), ?, ?,
       CASE WHEN ? > 0 AND ? = 'pending' THEN UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND ELSE '1000-01-01 00:00:00' END,
       CASE WHEN ? = 'published' THEN UTC_TIMESTAMP(6) ELSE '1000-01-01 00:00:00' END, CASE WHEN ? > 0 THEN 'scale: failed before' END
FROM (SELECT ? + %s AS g FROM %s) s
WHERE g < ?`

type scaleRows struct {
	topic, prefix string
	aggregates    int
	state         string
	attempts      int
	delay         time.Duration
	pad           int
}

func (r scaleRows) insert(ctx context.Context, env *Env, first, n int) error {
	names, err := env.names()
	if err != nil {
		return err
	}
	if env.MySQL() {
		expr, from := testkit.MySQLNumbers(n)
		_, err := env.DB.SQL.ExecContext(ctx, names.Render(fmt.Sprintf(scaleInsertMySQL, expr, from)),
			r.topic, r.prefix, max(r.aggregates, 1), r.pad, r.state, r.attempts,
			r.attempts, r.state, r.delay.Microseconds(), r.state, r.attempts, first, first+n)
		if err != nil {
			return fmt.Errorf("insert %d rows: %w", n, err)
		}
		return nil
	}
	return r.insertInto(ctx, env, names, first, n)
}

// insertInto is insert into the outbox table names (PostgreSQL).
func (r scaleRows) insertInto(ctx context.Context, env *Env, names outboxsql.Names, first, n int) error {
	_, err := env.DB.SQL.ExecContext(ctx, names.Render(scaleInsert), r.topic, r.prefix, max(r.aggregates, 1), r.state, r.attempts,
		fmt.Sprintf("%d milliseconds", r.delay.Milliseconds()), first, first+n-1, r.pad)
	if err != nil {
		return fmt.Errorf("insert %d rows: %w", n, err)
	}
	return nil
}

// insertChunked inserts n rows in statements of at most chunk rows.
func (r scaleRows) insertChunked(ctx context.Context, env *Env, n, chunk int) error {
	for done := 0; done < n; done += chunk {
		if err := r.insert(ctx, env, done, min(chunk, n-done)); err != nil {
			return err
		}
	}
	return nil
}

func scaleCount(ctx context.Context, env *Env, where string) (int, error) {
	names, err := env.names()
	if err != nil {
		return 0, err
	}
	var n int
	if err := env.DB.SQL.QueryRowContext(ctx, `SELECT count(*) FROM `+names.Table+` WHERE `+where).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s: %w", where, err)
	}
	return n, nil
}

// waitCount waits until the rows matching where are at least want.
func waitCount(ctx context.Context, env *Env, where string, want int, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		n, err := scaleCount(ctx, env, where)
		if err != nil {
			return 0, err
		}
		if n >= want {
			return time.Since(start), nil
		}
		if time.Since(start) > limit {
			return 0, fmt.Errorf("%d of %d rows %s after %s", n, want, where, limit)
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
}

// waitEmpty waits until no row is pending or claimed, for at most limit,
// and returns how long that took. A poll reads the first attempts from the
// claim floor on, and the retries: a poll of the claim index from its
// start walked the entries of every row drained since the last VACUUM
// (8,000 buffers a poll at 3.8M drained rows, as much as the three relays'
// claims and marks together), so the harness slowed the drain it timed.
// Trusting the floor here proves nothing by itself: the caller counts the
// published rows once the poll says empty.
func waitEmpty(ctx context.Context, env *Env, limit time.Duration) (time.Duration, error) {
	names, err := outboxsql.NamesFor(env.DB.Schema, "")
	if err != nil {
		return 0, err
	}
	start := time.Now()
	for {
		var left bool
		if err := env.DB.SQL.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+names.Table+` WHERE state IN ('pending', 'claimed') AND retry_at = '-infinity'
                AND id >= (SELECT coalesce(max(floor), 0) FROM `+names.Floor+`))
            OR EXISTS (SELECT 1 FROM `+names.Table+` WHERE state IN ('pending', 'claimed') AND retry_at > '-infinity')`).Scan(&left); err != nil {
			return 0, err
		}
		if !left {
			return time.Since(start), nil
		}
		if time.Since(start) > limit {
			return 0, fmt.Errorf("rows still unpublished after %s", limit)
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
}

func analyze(ctx context.Context, env *Env) error {
	names, err := env.names()
	if err != nil {
		return err
	}
	if env.MySQL() {
		_, err := env.DB.SQL.ExecContext(ctx, "ANALYZE TABLE "+names.Table)
		return err
	}
	if _, err := env.DB.SQL.ExecContext(ctx, "VACUUM ANALYZE "+names.Table); err != nil {
		return err
	}
	_, _ = env.DB.SQL.ExecContext(ctx, "CHECKPOINT")
	return nil
}

// world starts a broker and a fleet of n relays with flags.
func world(ctx context.Context, env *Env, flags RelayFlags, n int) (*Broker, *Fleet, func(), error) {
	b, err := StartBroker(ctx, env, BrokerConfig{})
	if err != nil {
		return nil, nil, nil, err
	}
	f, err := NewFleet(env, b.Addr(), flags)
	if err != nil {
		b.Close()
		return nil, nil, nil, err
	}
	for range n {
		if _, err := f.Start(); err != nil {
			f.Close()
			b.Close()
			return nil, nil, nil, err
		}
	}
	return b, f, func() { f.Close(); b.Close() }, nil
}

// BackoffAggregates: aggregates aggregates each have a row in retry
// backoff (a poison topic, an outage that failed them once) while healthy
// events of other aggregates are written: those publish within limit.
func BackoffAggregates(aggregates, healthy int, limit time.Duration) Scale {
	return Scale{Name: "backoff-aggregates", Run: func(ctx context.Context, env *Env) (string, error) {
		backoff := scaleRows{topic: TopicGorm, prefix: "backoff-", aggregates: aggregates, state: "pending", attempts: 1, delay: time.Hour}
		if err := backoff.insertChunked(ctx, env, aggregates, 100_000); err != nil {
			return "", err
		}
		if err := analyze(ctx, env); err != nil {
			return "", err
		}
		_, _, stop, err := world(ctx, env, DefaultRelayFlags(), 1)
		if err != nil {
			return "", err
		}
		defer stop()
		start := time.Now()
		good := scaleRows{topic: TopicGorm, prefix: "healthy-", aggregates: 1000, state: "pending"}
		if err := good.insert(ctx, env, aggregates, healthy); err != nil {
			return "", err
		}
		if _, err := waitCount(ctx, env, `state = 'published'`, healthy, limit); err != nil {
			return "", fmt.Errorf("backoff-aggregates: healthy events stalled behind %d rows in backoff: %w", aggregates, err)
		}
		took := time.Since(start)
		untouched, err := scaleCount(ctx, env, `aggregate_id LIKE 'backoff-%' AND state = 'pending' AND attempts = 1`)
		if err != nil {
			return "", err
		}
		if untouched != aggregates {
			return "", fmt.Errorf("backoff-aggregates: %d of %d rows in backoff left as they were", untouched, aggregates)
		}
		return fmt.Sprintf("backoff_rows=%d healthy=%d published_in_s=%.1f", aggregates, healthy, took.Seconds()), nil
	}}
}

// DeadPrune: dead rows are kept (a poison topic's, for weeks) while events
// are written at rate per second for d with a short retention, the relay
// pruning every interval: pruning keeps up, no published row outlives the
// retention by more than the prune interval (so the table holds that
// window's worth of writes, whatever it has written), and the dead rows
// stay. d should exceed retention (5s), interval and a 10s margin. On
// PostgreSQL and MySQL alike.
func DeadPrune(dead, rate int, d, interval time.Duration) Scale {
	return Scale{Name: "dead-prune", Run: func(ctx context.Context, env *Env) (string, error) {
		rows := scaleRows{topic: TopicGorm, prefix: "dead-", aggregates: dead, state: "dead", attempts: 10}
		if err := rows.insertChunked(ctx, env, dead, 200_000); err != nil {
			return "", err
		}
		if err := analyze(ctx, env); err != nil {
			return "", err
		}
		const retention = 5 * time.Second
		flags := DefaultRelayFlags()
		flags.Extra = []string{"--retention", retention.String(), "--prune-interval", interval.String()}
		_, _, stop, err := world(ctx, env, flags, 1)
		if err != nil {
			return "", err
		}
		defer stop()
		live := scaleRows{topic: TopicGorm, prefix: "live-", aggregates: 1000, state: "pending"}
		tick := 100 * time.Millisecond
		per := rate * int(tick) / int(time.Second)
		written, start := 0, time.Now()
		for next := start; time.Since(start) < d; next = next.Add(tick) {
			if err := live.insert(ctx, env, dead+written, per); err != nil {
				return "", err
			}
			written += per
			if !sleep(ctx, time.Until(next.Add(tick))) {
				return "", ctx.Err()
			}
		}
		elapsed := time.Since(start)
		// Every published row older than the retention plus a prune
		// interval and a margin must be gone: the table holds no more
		// published rows than that window's worth of writes.
		window := retention + interval + 10*time.Second
		stale, err := scaleCount(ctx, env, `state = 'published' AND published_at < `+env.ago(window))
		if err != nil {
			return "", err
		}
		published, err := scaleCount(ctx, env, `state = 'published'`)
		if err != nil {
			return "", err
		}
		deadLeft, err := scaleCount(ctx, env, `state = 'dead'`)
		if err != nil {
			return "", err
		}
		bound := int(float64(rate) * window.Seconds())
		line := fmt.Sprintf("dead=%d insert_eps=%.0f written=%d published_left=%d published_bound=%d stale_published=%d dead_left=%d",
			dead, float64(written)/elapsed.Seconds(), written, published, bound, stale, deadLeft)
		switch {
		case stale != 0:
			return line, fmt.Errorf("dead-prune: %d published rows outlived retention and a prune interval: pruning fell behind", stale)
		case published > bound:
			return line, fmt.Errorf("dead-prune: %d published rows left, more than the %s of writes the retention and a prune interval keep (%d)", published, window, bound)
		case deadLeft != dead:
			return line, fmt.Errorf("dead-prune: %d of %d dead rows left", deadLeft, dead)
		case published >= written:
			return line, errors.New("dead-prune: nothing was pruned")
		}
		return line, nil
	}}
}

// BigBacklog: 3 relays started on a backlog of big rows (a fleet restart
// after an outage) drain it at no less than bound times their rate on one
// of small rows; with a bound of 0 the ratio is reported, not judged.
//
// Each rate is the median of its drains, each on a table emptied before
// it: smallRuns of the small backlog and bigRuns of the big one,
// interleaved (small, big, small, ...), so that load from outside the
// scenario falls on both sides alike. One drain of a few seconds, start-up
// included, swung from 14,700 to 25,500 events/s between runs on the
// 2-core machine, more than the effect measured; at CI's size, with other
// test packages running beside it, one drain of each side differed by as
// much.
func BigBacklog(small, big, bigRuns int, bound float64) Scale {
	return Scale{Name: "big-backlog", Alone: true, Run: func(ctx context.Context, env *Env) (string, error) {
		names, err := outboxsql.NamesFor(env.DB.Schema, "")
		if err != nil {
			return "", err
		}
		rate := func(n int) (float64, error) {
			rows := scaleRows{topic: TopicGorm, prefix: "agg-", aggregates: 1000, state: "pending"}
			if err := rows.insertChunked(ctx, env, n, 500_000); err != nil {
				return 0, err
			}
			if err := analyze(ctx, env); err != nil {
				return 0, err
			}
			_, _, stop, err := world(ctx, env, DefaultRelayFlags(), 3)
			if err != nil {
				return 0, err
			}
			// Not a count of the published rows: on 10,000,000 rows each
			// count is a scan of the table that competes with the relays.
			took, err := waitEmpty(ctx, env, time.Hour)
			stop()
			if err != nil {
				return 0, err
			}
			if published, err := scaleCount(ctx, env, `state = 'published'`); err != nil || published != n {
				return 0, fmt.Errorf("big-backlog: %d of %d rows published once the backlog was empty: %v", published, n, err)
			}
			// Emptied for the next drain, the relays stopped: a DELETE of
			// 10,000,000 rows and the VACUUM after it took minutes.
			if _, err := env.DB.SQL.ExecContext(ctx, `TRUNCATE `+names.Table); err != nil {
				return 0, err
			}
			return float64(n) / took.Seconds(), nil
		}
		var smalls, bigs []float64
		for i := 0; i < max(smallRuns, bigRuns); i++ {
			if i < smallRuns {
				r, err := rate(small)
				if err != nil {
					return "", err
				}
				smalls = append(smalls, r)
			}
			if i < bigRuns {
				r, err := rate(big)
				if err != nil {
					return "", err
				}
				bigs = append(bigs, r)
			}
		}
		r1, runs1 := median(smalls)
		r2, runs2 := median(bigs)
		line := fmt.Sprintf("small=%d small_eps=%.0f small_runs=%s big=%d big_eps=%.0f big_runs=%s ratio=%.2f",
			small, r1, runs1, big, r2, runs2, r2/r1)
		if r2 < bound*r1 {
			return line, fmt.Errorf("big-backlog: %d rows drain at %.2f× the rate of %d", big, r2/r1, small)
		}
		return line, nil
	}}
}

// smallRuns is how many drains of the small backlog BigBacklog takes the
// median of.
const smallRuns = 3

// median returns the median of rates and the rates in the order taken,
// joined with "/".
func median(rates []float64) (float64, string) {
	runs := make([]string, len(rates))
	for i, r := range rates {
		runs[i] = fmt.Sprintf("%.0f", r)
	}
	sorted := slices.Clone(rates)
	slices.Sort(sorted)
	return percentile(sorted, 0.5), strings.Join(runs, "/")
}

// WALBigTransaction: one transaction writes n events of pad bytes while
// a WAL relay streams: it publishes them with its peak RSS under
// maxRSSMiB.
func WALBigTransaction(n, pad, maxRSSMiB int) Scale {
	return Scale{Name: "wal-big-tx", Run: func(ctx context.Context, env *Env) (string, error) {
		flags := DefaultRelayFlags()
		flags.Mode = WALMode
		_, f, stop, err := world(ctx, env, flags, 1)
		if err != nil {
			return "", err
		}
		defer stop()
		defer killAndDropWALSlot(ctx, env, f)
		if !waitUntil(ctx, 30*time.Second, func() bool { return f.Streaming() != "" }) {
			return "", errors.New("wal-big-tx: no relay streams")
		}
		id := f.Streaming()
		start := time.Now()
		rows := scaleRows{topic: TopicGorm, prefix: "agg-", aggregates: 1000, state: "pending", pad: pad}
		if err := rows.insert(ctx, env, 0, n); err != nil {
			return "", err
		}
		// The WAL relay keeps published rows for the verifier (walArgs'
		// --retention) and marks them.
		if _, err := waitCount(ctx, env, `state = 'published'`, n, 20*time.Minute); err != nil {
			return "", fmt.Errorf("wal-big-tx: %w", err)
		}
		took := time.Since(start)
		rss, err := peakRSSMiB(f.PID(id))
		if err != nil {
			return "", err
		}
		line := fmt.Sprintf("events=%d payload_bytes=%d seconds=%.1f relay_peak_rss_mib=%d", n, pad, took.Seconds(), rss)
		if rss > maxRSSMiB {
			return line, fmt.Errorf("wal-big-tx: the relay's peak RSS is %d MiB, over %d", rss, maxRSSMiB)
		}
		return line, nil
	}}
}

// WALDBA: a DBA at work under a streaming WAL relay: the table dropped
// from the publication, then events written; the publication dropped;
// the slot made again by hand. The relay refuses or republishes, and no
// unpublished row is ever deleted.
func WALDBA() Scale {
	return Scale{Name: "wal-dba", Run: func(ctx context.Context, env *Env) (string, error) {
		flags := DefaultRelayFlags()
		flags.Mode = WALMode
		flags.Extra = []string{"--retention", "0s"} // delete once confirmed: what the cleanup must not do early
		b, f, stop, err := world(ctx, env, flags, 1)
		if err != nil {
			return "", err
		}
		defer stop()
		defer killAndDropWALSlot(ctx, env, f)
		table, slot, pub, err := walNames(env)
		if err != nil {
			return "", err
		}
		exec := func(q string) error {
			_, err := env.DB.SQL.ExecContext(ctx, q)
			return err
		}
		streaming := func() bool { return waitUntil(ctx, 30*time.Second, func() bool { return f.Streaming() != "" }) }
		if !streaming() {
			return "", errors.New("wal-dba: no relay streams")
		}
		rows := scaleRows{topic: TopicGorm, prefix: "dba-", aggregates: 5, state: "pending"}
		written := 0
		write := func(n int) error {
			err := rows.insert(ctx, env, written, n)
			written += n
			return err
		}
		// Each step: the DBA's change, events written, then what the table
		// must hold after the relay had time to act on it.
		var notes []string
		for _, step := range []struct {
			name, change, undo string
		}{
			{"drop-table", "ALTER PUBLICATION " + pub + " DROP TABLE " + table, "ALTER PUBLICATION " + pub + " ADD TABLE " + table},
			{"publish-update-only", "ALTER PUBLICATION " + pub + " SET (publish = 'update, delete')", "ALTER PUBLICATION " + pub + " SET (publish = 'insert, update, delete, truncate')"},
		} {
			if err := exec(step.change); err != nil {
				return "", fmt.Errorf("wal-dba: %s: %w", step.name, err)
			}
			if err := write(5); err != nil {
				return "", err
			}
			if !sleep(ctx, 10*time.Second) {
				return "", ctx.Err()
			}
			if n, err := scaleCount(ctx, env, `true`); err != nil || n < 5 {
				return "", fmt.Errorf("wal-dba: %s: %d rows left in the table, want the 5 unpublished ones (%v)", step.name, n, err)
			}
			if err := exec(step.undo); err != nil {
				return "", err
			}
			notes = append(notes, step.name+"=kept")
			// The relay that stopped on the change is started again, as a
			// supervisor does.
			if len(f.Live()) == 0 {
				if _, err := f.Start(); err != nil {
					return "", err
				}
			}
			if !streaming() {
				return "", fmt.Errorf("wal-dba: no relay streams after %s was undone", step.name)
			}
		}
		// The slot made again by hand: stop the relay, drop the slot,
		// write events, make the slot, start the relay.
		f.KillAll()
		// A killed relay's walsender can hold the slot a moment longer.
		for tries := 0; ; tries++ {
			err := exec("SELECT pg_drop_replication_slot('" + slot + "')")
			if err == nil {
				break
			}
			if tries == 50 || !strings.Contains(err.Error(), "is active") {
				return "", err
			}
			if !sleep(ctx, 200*time.Millisecond) {
				return "", ctx.Err()
			}
		}
		if err := write(3); err != nil {
			return "", err
		}
		if err := exec("SELECT pg_create_logical_replication_slot('" + slot + "', 'pgoutput')"); err != nil {
			return "", err
		}
		if _, err := f.Start(); err != nil {
			return "", err
		}
		if !streaming() {
			return "", errors.New("wal-dba: no relay streams on the slot made by hand")
		}
		notes = append(notes, "slot-by-hand=republished")
		// Every event written reaches the broker (more than once is fine).
		seen := map[string]bool{}
		deadline := time.Now().Add(60 * time.Second)
		for len(seen) < written && time.Now().Before(deadline) {
			clear(seen)
			if err := ReadAll(ctx, b.Addr(), []string{TopicGorm}, func(d Delivery) error { seen[d.EventID] = true; return nil }); err != nil {
				return "", err
			}
			sleep(ctx, time.Second)
		}
		if len(seen) < written {
			return "", fmt.Errorf("wal-dba: %d of %d events on the broker", len(seen), written)
		}
		return fmt.Sprintf("events=%d delivered=%d %s", written, len(seen), strings.Join(notes, " ")), nil
	}}
}

// walNames returns the scenario table's qualified name and its WAL relay's
// default slot and publication.
func walNames(env *Env) (table, slot, pub string, err error) {
	names, err := outboxsql.NamesFor(env.DB.Schema, "")
	if err != nil {
		return "", "", "", err
	}
	name := walDefaultName(env) // the default slot and publication (see dropWALSlot)
	return names.Table, name, name, nil
}

// peakRSSMiB reads a process's peak resident set size (VmHWM).
func peakRSSMiB(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				return 0, err
			}
			return kb / 1024, nil
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
}
