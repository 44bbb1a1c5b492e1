package harness

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// TenantFairness: one `outbox relay --schemas` process serves the outbox
// tables of tables schemas (migrated by `outbox migrate up --schemas`).
// The first holds a backlog of backlog rows when the relay starts; each
// of the others gets rate events a second from a writer for window, while
// that backlog is still draining. The others' events are published with a
// p99 from creation to mark under maxP99: a hot tenant does not starve the
// rest. The backlog need not drain: the scenario fails if it drained
// before the window ended, since nothing was then measured beside it.
//
// The time measured per event is published_at - created_at: the writer's
// clock before its commit to the relay's mark after the broker's ack, an
// upper bound of commit-to-ack (the same machine's clock on both ends).
func TenantFairness(tables, backlog, rate int, window, maxP99 time.Duration) Scale {
	return Scale{Name: "tenant-fairness", Run: func(ctx context.Context, env *Env) (string, error) {
		base := env.DB.Schema
		schemas := make([]string, tables)
		for i := range schemas {
			schemas[i] = fmt.Sprintf("%s_t%03d", base, i)
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			for _, s := range schemas {
				_, _ = env.DB.SQL.ExecContext(dctx, "DROP SCHEMA IF EXISTS "+ident.Quote(s)+" CASCADE")
			}
		}()
		for _, s := range schemas {
			if _, err := env.DB.SQL.ExecContext(ctx, "CREATE SCHEMA "+ident.Quote(s)); err != nil {
				return "", err
			}
		}
		pattern := base + "_t*"
		mctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		out, err := exec.CommandContext(mctx, env.Bin.Outbox, "migrate", "up", "--database-url", env.DB.URL, "--schemas", pattern).CombinedOutput()
		cancel()
		if err != nil {
			return "", fmt.Errorf("tenant-fairness: outbox migrate up --schemas: %w\n%s", err, out)
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

		flags := DefaultRelayFlags()
		// Production's intervals: a hundred tables' heartbeats and polls
		// at the crash suite's would be most of what the machine does.
		flags.Heartbeat, flags.StaleAfter, flags.Lease = 2*time.Second, 15*time.Second, 30*time.Second
		flags.Schemas = pattern
		flags.Extra = []string{"--poll-interval", "1s"}
		_, _, stop, err := world(ctx, env, flags, 1)
		if err != nil {
			return "", err
		}
		defer stop()

		// Writers: every tenant but the hot one, rate events a second each,
		// for window.
		wctx, stopWriters := context.WithCancel(ctx)
		defer stopWriters()
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			written int
			werr    error
		)
		for i, s := range schemas[1:] {
			w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: txoutbox.Table{Schema: s}})
			if err != nil {
				return "", err
			}
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
						err = writeOne(context.WithoutCancel(wctx), env, w, ev)
					}
					mu.Lock()
					if err != nil && werr == nil {
						werr = err
					}
					if err == nil {
						written++
					}
					mu.Unlock()
				}
			}()
		}
		start := time.Now()
		if !sleep(ctx, window) {
			return "", ctx.Err()
		}
		stopWriters()
		wg.Wait()
		var hotLeft int
		if err := env.DB.SQL.QueryRowContext(ctx, `SELECT count(*) FROM `+hot.Table+` WHERE state <> 'published'`).Scan(&hotLeft); err != nil {
			return "", err
		}
		hotEPS := float64(backlog-hotLeft) / time.Since(start).Seconds()
		if werr != nil {
			return "", fmt.Errorf("tenant-fairness: a writer failed: %w", werr)
		}

		// Every tenant's events published, then their latencies.
		var union []string
		for _, s := range schemas[1:] {
			n, err := outboxsql.NamesFor(s, "")
			if err != nil {
				return "", err
			}
			union = append(union, "SELECT created_at, published_at, state FROM "+n.Table)
		}
		all := "(" + strings.Join(union, " UNION ALL ") + ") e"
		deadline := time.Now().Add(time.Minute)
		for {
			var left int
			if err := env.DB.SQL.QueryRowContext(ctx, "SELECT count(*) FROM "+all+" WHERE state <> 'published'").Scan(&left); err != nil {
				return "", err
			}
			if left == 0 {
				break
			}
			if time.Now().After(deadline) {
				return "", fmt.Errorf("tenant-fairness: %d of the other tenants' events unpublished a minute after the writers stopped", left)
			}
			if !sleep(ctx, 200*time.Millisecond) {
				return "", ctx.Err()
			}
		}
		var (
			events   int
			p50, p99 float64
			worst    float64
		)
		if err := env.DB.SQL.QueryRowContext(ctx, `SELECT count(*),
                coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at)), 0),
                coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at)), 0),
                coalesce(max(extract(epoch FROM published_at - created_at)), 0)
            FROM `+all).Scan(&events, &p50, &p99, &worst); err != nil {
			return "", err
		}
		line := fmt.Sprintf("tables=%d backlog=%d rate_per_table=%d window_s=%.0f events=%d p50_ms=%.0f p99_ms=%.0f max_ms=%.0f backlog_left=%d backlog_eps=%.0f",
			tables, backlog, rate, window.Seconds(), events, p50*1000, p99*1000, worst*1000, hotLeft, hotEPS)
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
			return line, fmt.Errorf("tenant-fairness: the other tenants' p99 from creation to mark is %.0f ms beside a backlog of %d, over %s", p99*1000, backlog, maxP99)
		}
		return line, nil
	}}
}

// writeOne writes ev in a transaction of its own.
func writeOne(ctx context.Context, env *Env, w *txoutbox.Writer, ev txoutbox.Event) error {
	tx, err := env.DB.SQL.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := w.Write(ctx, tx, ev); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}
