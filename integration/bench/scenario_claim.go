package main

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/relay"
)

// claimFlatness is the result of the claim scenario.
type claimFlatness struct {
	Scenario   string  `json:"scenario"`
	Retained   int     `json:"published_rows_retained"`
	Backoff    int     `json:"rows_in_backoff"`
	Scheduled  int     `json:"rows_scheduled"`
	Batch      int     `json:"batch"`
	Rounds     int     `json:"rounds"`
	EmptyMS    float64 `json:"empty_p50_ms"`
	RetainedMS float64 `json:"retained_p50_ms"`
	Flatness   float64 `json:"claim_flatness"`
}

// runClaim times the relay's own claims of a batch on a table retaining a
// million published rows and on an empty one. A relay (no-op publisher,
// polling) runs on each table, its database handle timing every execution
// of the claim statement, from the query to the last row read; each round
// writes one batch of pending rows to each table in turn and waits until
// the relay drained it. The ratio of the median claim times that took rows
// is the flatness.
func runClaim(ctx context.Context, e *env) (claimFlatness, error) {
	batch := e.relayConfig().BatchSize
	if batch == 0 {
		batch = relay.BatchSizeDefault
	}
	type arm struct {
		s     *schemaDB
		times *claimTimes
		stop  func()
	}
	var arms []*arm
	defer func() {
		for _, a := range arms {
			if a.stop != nil {
				a.stop()
			}
			a.s.close()
		}
	}()
	for _, retained := range []int{0, e.opts.claimRows} {
		name := "claim_empty"
		if retained > 0 {
			name = "claim_retained"
		}
		s, err := e.newSchema(ctx, name)
		if err != nil {
			return claimFlatness{}, err
		}
		a := &arm{s: s, times: &claimTimes{}}
		arms = append(arms, a)
		if retained > 0 {
			if err := insertBacklog(ctx, s, "bench.claim", retained, e.opts.aggregates, "published", 0); err != nil {
				return claimFlatness{}, err
			}
			if err := insertBackoff(ctx, s, e.opts.claimBackoff); err != nil {
				return claimFlatness{}, err
			}
			if err := insertScheduled(ctx, s, "bench.claim", e.opts.scheduled); err != nil {
				return claimFlatness{}, err
			}
		}
		timed, err := timingDB(s.URL, s.Names.Render(outboxsql.Claim), a.times)
		if err != nil {
			return claimFlatness{}, err
		}
		rs := *s
		rs.SQL = timed
		rr := relayRun{replicas: 1, cfg: relay.Config{BatchSize: batch, DisableListen: true, PollInterval: 20 * time.Millisecond},
			publisher: func() (message.Publisher, error) { return kafkatest.NopPublisher{}, nil }}
		stop, err := rr.start(ctx, &rs)
		if err != nil {
			timed.Close()
			return claimFlatness{}, err
		}
		a.stop = func() { stop(); timed.Close() }
	}
	first := e.opts.claimRows
	for range e.opts.claimRounds {
		for _, a := range arms {
			if err := insertBacklogRows(ctx, a.s, "bench.claim", batch, e.opts.aggregates, first); err != nil {
				return claimFlatness{}, err
			}
			if err := waitFreshDrained(ctx, a.s, e.opts.timeout); err != nil {
				return claimFlatness{}, fmt.Errorf("claim: %w", err)
			}
		}
		first += batch
	}
	med := make([]float64, len(arms))
	for i, a := range arms {
		ms := a.times.nonEmpty()
		if len(ms) < e.opts.claimRounds/2 {
			return claimFlatness{}, fmt.Errorf("claim: only %d claims returned rows in %d rounds", len(ms), e.opts.claimRounds)
		}
		med[i] = quantile(ms, 0.5)
	}
	return claimFlatness{Scenario: "claim", Retained: e.opts.claimRows, Backoff: e.opts.claimBackoff, Scheduled: e.opts.scheduled, Batch: batch, Rounds: e.opts.claimRounds,
		EmptyMS: med[0], RetainedMS: med[1], Flatness: med[1] / med[0]}, nil
}

// insertBackoff writes n rows in retry backoff for a day, each of an
// aggregate of its own that no batch of the scenario writes (a poison
// topic's, an outage's that failed them once), as Fail leaves them.
func insertBackoff(ctx context.Context, s *schemaDB, n int) error {
	if n == 0 {
		return nil
	}
	_, err := s.SQL.ExecContext(ctx, s.Names.Render(`
INSERT INTO {{table}} (event_id, topic, aggregate_id, event_type, payload, attempts, next_attempt_at, retry_at, last_error)
SELECT gen_random_uuid(), 'bench.claim', 'backoff-' || g, 'bench.event', '{}', 1, now() + interval '1 day', now() + interval '1 day', 'failed'
FROM generate_series(1, $1::bigint) AS g`), n)
	if err != nil {
		return fmt.Errorf("write %d rows in backoff: %w", n, err)
	}
	_, err = s.SQL.ExecContext(ctx, "VACUUM ANALYZE "+s.Names.Table)
	return err
}

// claimTimes collects the durations of claims that returned rows.
type claimTimes struct {
	mu sync.Mutex
	ms []float64
}

func (c *claimTimes) add(d time.Duration) {
	c.mu.Lock()
	c.ms = append(c.ms, d.Seconds()*1000)
	c.mu.Unlock()
}

func (c *claimTimes) nonEmpty() []float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.ms)
	slices.Sort(out)
	return out
}

// timingDB opens a pool whose connections time every execution of query,
// whatever transaction or settings the relay wraps it in, so the scenario
// measures the relay's claim as the relay runs it.
func timingDB(url, query string, times *claimTimes) (*sql.DB, error) {
	return observedDB(url, func(q string, rows int, d time.Duration) {
		if q == query && rows > 0 {
			times.add(d)
		}
	})
}

// waitFreshDrained waits until the rows of a round are published: the
// unpublished rows that never failed (outbox_fresh_idx), leaving out the
// rows in retry backoff the scenario keeps beside them (-claim-backoff),
// which are due only tomorrow.
func waitFreshDrained(ctx context.Context, s *schemaDB, timeout time.Duration) error {
	q := s.Names.Render(`SELECT EXISTS (SELECT 1 FROM {{table}} WHERE state IN ('pending', 'claimed') AND retry_at = '-infinity')`)
	deadline := time.Now().Add(timeout)
	for {
		var left bool
		if err := s.SQL.QueryRowContext(ctx, q).Scan(&left); err != nil {
			return fmt.Errorf("poll backlog: %w", err)
		}
		if !left {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("backlog not drained after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
