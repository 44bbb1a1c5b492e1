package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// TenantFairness: one `outbox relay --schemas` process serves the outbox
// tables of tables schemas (migrated by `outbox migrate up --schemas`).
// The first holds a backlog of backlog rows when the relay starts; each
// of the others gets rate events a second from a writer for window, while
// that backlog is still draining. The others' events are published with a
// p99 from commit to mark under maxP99: a hot tenant does not starve the
// rest. The backlog need not drain: the scenario fails if it drained
// before the window ended, since nothing was then measured beside it.
//
// The window measures the steady state. Each writer has a connection of
// its own, opened before the relay starts, and the writers start once the
// relay serves every other tenant's table: it has published one warm-up
// event written to each through its writer's connection (then deleted).
// A relay starting on a hundred tables takes seconds to register and take
// its shards on each, and events written meanwhile wait for that, not for
// the backlog: that start is its own figure, warmup_ms (the relay's start
// to the last warm-up event published; 2.6–3.4 s at full size on 2
// cores), beside the baseline's (baseline_warmup_ms), so that a backlog
// slowing the relay's start shows.
// Without the warm-up, a full-size window's first 5 seconds alone held
// over 1% of its events past a second.
//
// First, the same writers run for window with the first table empty (a
// relay of their own, stopped after), and the line gives their p99
// (baseline_p99_ms) beside the one measured with the backlog: what the
// backlog costs the others is the difference, what the machine's capacity
// costs them is the baseline. Not a bound: at small sizes both are tens
// of milliseconds, and their ratio is noise.
//
// The time judged per event is commit-to-ack: from the moment the
// writer's commit returned (the writer's clock) to published_at, the
// relay's mark after the broker's ack (the database's clock; the same
// machine's). Measured from created_at instead (set before the transaction
// began), it would count the writer's own commit, which the relay has no
// part in: 99 writers committing 10 transactions a second each, every one
// with a NOTIFY, queue on PostgreSQL's NOTIFY lock, held by each
// committing transaction across its WAL flush. pgbench alone on the
// 2-core test machine (no relay running) commits that load at an average
// of 547 ms; beside a relay, the writers of a full-size run spent 90% of
// their time waiting in COMMIT (pg_stat_activity, wait event Lock:object).
// Both are printed; the bound is on commit-to-ack. The line also says how
// many events a second the writers managed (written_eps, of
// rate × (tables-1) asked for): a writer commits one event at a time, so
// slow commits make it write fewer.
func TenantFairness(tables, backlog, rate int, window, maxP99 time.Duration) Scale {
	return Scale{Name: "tenant-fairness", Alone: true, Run: func(ctx context.Context, env *Env) (string, error) {
		schemas, pattern, drop, err := tenantSchemas(ctx, env, tables)
		defer drop()
		if err != nil {
			return "", fmt.Errorf("tenant-fairness: %w", err)
		}
		others := make([]string, 0, tables-1) // the other tenants' tables
		writers := make([]*txoutbox.Writer, 0, tables-1)
		var union []string
		for _, s := range schemas[1:] {
			n, err := outboxsql.NamesFor(s, "")
			if err != nil {
				return "", err
			}
			w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: txoutbox.Table{Schema: s}})
			if err != nil {
				return "", err
			}
			others = append(others, n.Table)
			writers = append(writers, w)
			union = append(union, "SELECT event_id, created_at, published_at, state FROM "+n.Table)
		}
		all := "(" + strings.Join(union, " UNION ALL ") + ") e"
		flags := DefaultRelayFlags()
		// Production's intervals: a hundred tables' heartbeats and polls
		// at the crash suite's would be most of what the machine does.
		flags.Heartbeat, flags.StaleAfter, flags.Lease = 2*time.Second, 15*time.Second, 30*time.Second
		flags.Schemas = pattern
		flags.Extra = []string{"--poll-interval", "1s"}
		// A connection of its own for each writer, as a service's warm pool
		// has. Through the shared pool, the writers opened their
		// connections in the window's first seconds (a forked backend
		// each), and every backend then read the catalog of each of the
		// tables it came to write: the baseline's first 15 seconds had a
		// p99 over a second, the same writers' later ones under half of it.
		conns, err := tenantConns(ctx, env, len(schemas)-1)
		if err != nil {
			return "", err
		}
		defer closeAll(conns)

		// The baseline: the writers alone.
		baseStart := time.Now()
		_, _, stop, err := world(ctx, env, flags, 1)
		if err != nil {
			return "", err
		}
		baseServed, err := tenantWarmUp(ctx, env, conns, writers, others, all)
		if err != nil {
			stop()
			return "", fmt.Errorf("tenant-fairness: the baseline: %w", err)
		}
		baseWarm := baseServed.Sub(baseStart)
		committed, _, err := tenantWriters(ctx, conns, writers, rate, window)
		if err == nil {
			err = tenantDrained(ctx, env, all)
		}
		var baseline []float64
		if err == nil {
			baseline, _, err = tenantLatencies(ctx, env, all, committed)
		}
		stop()
		if err != nil {
			return "", fmt.Errorf("tenant-fairness: the baseline, without the backlog: %w", err)
		}
		if _, err := env.DB.SQL.ExecContext(ctx, "TRUNCATE "+strings.Join(others, ", ")); err != nil {
			return "", err
		}

		hot, err := outboxsql.NamesFor(schemas[0], "")
		if err != nil {
			return "", err
		}
		rows := scaleRows{topic: TopicGorm, prefix: "hot-", aggregates: 1000, state: "pending"}
		for done := 0; done < backlog; done += 500_000 {
			if err := rows.insertInto(ctx, env, hot, done, min(500_000, backlog-done)); err != nil {
				return "", err
			}
		}
		if _, err := env.DB.SQL.ExecContext(ctx, "VACUUM ANALYZE "+hot.Table); err != nil {
			return "", err
		}
		relayStart := time.Now()
		_, _, stop, err = world(ctx, env, flags, 1)
		if err != nil {
			return "", err
		}
		defer stop()
		served, err := tenantWarmUp(ctx, env, conns, writers, others, all)
		if err != nil {
			return "", err
		}
		warm := served.Sub(relayStart)
		committed, written, err := tenantWriters(ctx, conns, writers, rate, window)
		if err != nil {
			return "", err
		}
		var hotLeft int
		if err := env.DB.SQL.QueryRowContext(ctx, `SELECT count(*) FROM `+hot.Table+` WHERE state <> 'published'`).Scan(&hotLeft); err != nil {
			return "", err
		}
		hotEPS := float64(backlog-hotLeft) / time.Since(relayStart).Seconds() // drained since the relay started
		if err := tenantDrained(ctx, env, all); err != nil {
			return "", err
		}
		fromCommit, fromCreated, err := tenantLatencies(ctx, env, all, committed)
		if err != nil {
			return "", err
		}
		events := len(fromCreated)
		p99 := percentile(fromCommit, 0.99)
		line := fmt.Sprintf("tables=%d backlog=%d rate_per_table=%d window_s=%.0f events=%d written_eps=%.0f "+
			"commit_p50_ms=%.0f commit_p99_ms=%.0f commit_max_ms=%.0f created_p50_ms=%.0f created_p99_ms=%.0f created_max_ms=%.0f "+
			"baseline_p50_ms=%.0f baseline_p99_ms=%.0f backlog_left=%d backlog_eps=%.0f warmup_ms=%.0f baseline_warmup_ms=%.0f",
			tables, backlog, rate, window.Seconds(), events, float64(written)/window.Seconds(),
			percentile(fromCommit, 0.5)*1000, p99*1000, percentile(fromCommit, 1)*1000,
			percentile(fromCreated, 0.5)*1000, percentile(fromCreated, 0.99)*1000, percentile(fromCreated, 1)*1000,
			percentile(baseline, 0.5)*1000, percentile(baseline, 0.99)*1000, hotLeft, hotEPS, float64(warm.Milliseconds()), float64(baseWarm.Milliseconds()))
		// The measurement counts only if the others wrote beside the
		// backlog: it is not drained yet, and every one wrote at least a
		// second's worth.
		switch {
		case hotLeft == 0:
			return line, fmt.Errorf("tenant-fairness: the backlog of %d drained within the %s window: nothing was measured beside it", backlog, window)
		case written < (tables-1)*rate:
			return line, fmt.Errorf("tenant-fairness: the other tenants wrote %d events in %s: too few to measure", written, window)
		case events != written:
			return line, fmt.Errorf("tenant-fairness: %d events in the other tenants' tables, %d written", events, written)
		case p99 > maxP99.Seconds():
			return line, fmt.Errorf("tenant-fairness: the other tenants' p99 from commit to mark is %.0f ms beside a backlog of %d, over %s", p99*1000, backlog, maxP99)
		}
		return line, nil
	}}
}

// tenantConns opens n connections, each its own backend.
func tenantConns(ctx context.Context, env *Env, n int) ([]*sql.Conn, error) {
	conns := make([]*sql.Conn, 0, n)
	for range n {
		c, err := env.DB.SQL.Conn(ctx)
		if err == nil {
			err = c.PingContext(ctx)
		}
		if err != nil {
			closeAll(conns)
			return nil, err
		}
		conns = append(conns, c)
	}
	return conns, nil
}

func closeAll(conns []*sql.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// tenantWarmUp writes one event with each of writers, on its connection
// of conns, into the other tenants' tables (tables, their union all),
// empty until then; waits until the relay has published all of them,
// deletes them, and returns when it saw them all published.
func tenantWarmUp(ctx context.Context, env *Env, conns []*sql.Conn, writers []*txoutbox.Writer, tables []string, all string) (time.Time, error) {
	for i, w := range writers {
		ev, err := txoutbox.NewEvent(TopicGorm, "warmup", "warmup", "tenant.warmup", map[string]int{})
		if err != nil {
			return time.Time{}, err
		}
		if err := writeOne(ctx, conns[i], w, ev); err != nil {
			return time.Time{}, err
		}
	}
	if err := tenantDrained(ctx, env, all); err != nil {
		return time.Time{}, fmt.Errorf("warm-up: %w", err)
	}
	served := time.Now()
	for _, t := range tables {
		if _, err := env.DB.SQL.ExecContext(ctx, "DELETE FROM "+t+" WHERE aggregate_type = 'warmup'"); err != nil {
			return time.Time{}, err
		}
	}
	return served, nil
}

// tenantWriters writes rate events a second with each of writers for
// window, each on its connection of conns, and returns when each one's
// commit returned, by event id, and how many were written.
func tenantWriters(ctx context.Context, conns []*sql.Conn, writers []*txoutbox.Writer, rate int, window time.Duration) (map[uuid.UUID]time.Time, int, error) {
	wctx, stopWriters := context.WithCancel(ctx)
	defer stopWriters()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		written   int
		werr      error
		committed = map[uuid.UUID]time.Time{} // event → when its commit returned
	)
	for i, w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-wctx.Done():
					return
				case <-tick.C:
				}
				ev, err := txoutbox.NewEvent(TopicGorm, "tenant", fmt.Sprintf("t%d-%d", i, n%10), "tenant.event", map[string]int{"n": n})
				if err == nil {
					// Not cut short by the writers' stop: a commit cancelled
					// on its way may have committed, and the count of the
					// events written must be exact.
					err = writeOne(context.WithoutCancel(wctx), conns[i], w, ev)
				}
				at := time.Now()
				mu.Lock()
				if err != nil && werr == nil {
					werr = err
				}
				if err == nil {
					written++
					committed[ev.ID] = at
				}
				mu.Unlock()
			}
		}()
	}
	slept := sleep(ctx, window)
	stopWriters()
	wg.Wait()
	switch {
	case !slept:
		return nil, 0, ctx.Err()
	case werr != nil:
		return nil, 0, fmt.Errorf("tenant-fairness: a writer failed: %w", werr)
	}
	return committed, written, nil
}

// tenantDrained waits, a minute at most, until every event of all (the
// other tenants' tables) is published; it looks every 50ms, which is the
// resolution of the warm-up's time.
func tenantDrained(ctx context.Context, env *Env, all string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var left int
		if err := env.DB.SQL.QueryRowContext(ctx, "SELECT count(*) FROM "+all+" WHERE state <> 'published'").Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tenant-fairness: %d of the other tenants' events still unpublished after a minute", left)
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// tenantLatencies reads the events of all (the other tenants' tables) and
// returns, in seconds and sorted, each one's time from its commit's return
// (committed, by event id) to its mark, and from its created_at to its
// mark. An event committed does not know its commit return is an error.
func tenantLatencies(ctx context.Context, env *Env, all string, committed map[uuid.UUID]time.Time) (fromCommit, fromCreated []float64, err error) {
	rows, err := env.DB.SQL.QueryContext(ctx, "SELECT event_id, created_at, published_at FROM "+all)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id                   uuid.UUID
			created, publishedAt time.Time
		)
		if err := rows.Scan(&id, &created, &publishedAt); err != nil {
			return nil, nil, err
		}
		at, ok := committed[id]
		if !ok {
			return nil, nil, fmt.Errorf("tenant-fairness: event %s is in a tenant's table, but no writer's commit of it returned", id)
		}
		fromCommit = append(fromCommit, publishedAt.Sub(at).Seconds())
		fromCreated = append(fromCreated, publishedAt.Sub(created).Seconds())
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	slices.Sort(fromCommit)
	slices.Sort(fromCreated)
	return fromCommit, fromCreated, nil
}

// percentile is the p-th percentile of sorted, interpolated between the
// two nearest values as PostgreSQL's percentile_cont does; 0 for none.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	pos := p * float64(len(sorted)-1)
	lo := int(pos)
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	return sorted[lo] + (pos-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// writeOne writes ev in a transaction of its own on conn.
func writeOne(ctx context.Context, conn *sql.Conn, w *txoutbox.Writer, ev txoutbox.Event) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := w.Write(ctx, tx, ev); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// tenantSchemas makes tables schemas named after env's schema
// ("<schema>_t000", ...) and migrates their outbox tables with `outbox
// migrate up --schemas`, as an operator would. It returns the schemas, the
// pattern that selects them and drop, which drops them; call drop even
// when err is not nil.
func tenantSchemas(ctx context.Context, env *Env, tables int) (schemas []string, pattern string, drop func(), err error) {
	base := env.DB.Schema
	schemas = make([]string, tables)
	for i := range schemas {
		schemas[i] = fmt.Sprintf("%s_t%03d", base, i)
	}
	drop = func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, s := range schemas {
			_, _ = env.DB.SQL.ExecContext(dctx, "DROP SCHEMA IF EXISTS "+ident.Quote(s)+" CASCADE")
		}
	}
	for _, s := range schemas {
		if _, err := env.DB.SQL.ExecContext(ctx, "CREATE SCHEMA "+ident.Quote(s)); err != nil {
			return nil, "", drop, err
		}
	}
	pattern = base + "_t*"
	mctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(mctx, env.Bin.Outbox, "migrate", "up", "--database-url", env.DB.URL, "--schemas", pattern).CombinedOutput(); err != nil {
		return nil, "", drop, fmt.Errorf("outbox migrate up --schemas: %w\n%s", err, out)
	}
	return schemas, pattern, drop, nil
}
