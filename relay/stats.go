package relay

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox"
)

// Stats is txoutbox.Stats.
//
// Deprecated: use txoutbox.Stats; the type moved so that packages reading
// the outbox's state need not import the relay.
type Stats = txoutbox.Stats

// TopicStats is txoutbox.TopicStats.
//
// Deprecated: use txoutbox.TopicStats.
type TopicStats = txoutbox.TopicStats

// ReadStats is txoutbox.ReadStats.
//
// Deprecated: use txoutbox.ReadStats.
func ReadStats(ctx context.Context, db *sql.DB, table txoutbox.Table) (Stats, error) {
	return txoutbox.ReadStats(ctx, db, table)
}

// ReadTopicStats is txoutbox.ReadTopicStats.
//
// Deprecated: use txoutbox.ReadTopicStats.
func ReadTopicStats(ctx context.Context, db *sql.DB, table txoutbox.Table) (Stats, error) {
	return txoutbox.ReadTopicStats(ctx, db, table)
}

// Stats reads the relay's outbox stats (see txoutbox.ReadStats).
func (r *Relay) Stats(ctx context.Context) (txoutbox.Stats, error) {
	return txoutbox.ReadStats(ctx, r.db, r.cfg.Table)
}

// statsLoop refreshes the gauges' figures. The lag, one index entry away,
// is read every StatsInterval. The backlog and dead counts read an entry of
// every unpublished and dead row (see outboxsql.StatsCounts), so they are
// read every StatsInterval only while that is cheap: after a count that
// took d, the next waits at least statsCountSpacing × d. On a backlog of
// millions of rows, as after an outage, counting every StatsInterval took
// a server core from the database the relay is catching up on, on every
// replica; a count the StatementTimeout cut short was repeated as soon.
func (r *Relay) statsLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.StatsInterval)
	defer t.Stop()
	var countAt time.Time // when the counts are next read
	for {
		if start := time.Now(); !start.Before(countAt) {
			backlog, dead, err := r.readCounts(ctx)
			took := time.Since(start)
			wait := countSpacing(r.cfg.StatsInterval, took)
			countAt = start.Add(wait)
			if err == nil {
				r.met.setCounts(backlog, dead)
			} else if ctx.Err() == nil {
				r.log.Debug("relay: count the backlog", "err", err)
			}
			if wait > r.cfg.StatsInterval && ctx.Err() == nil {
				r.log.Debug("relay: counting the backlog is slow; counting less often", "took", took, "next_in", wait)
			}
		}
		if lag, err := r.readLag(ctx); err == nil {
			r.met.setLag(lag)
		} else if ctx.Err() == nil {
			r.log.Debug("relay: read the lag", "err", err)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// statsCountSpacing is how many times longer than the last count of the
// backlog the relay waits before it counts again: counting takes at most
// about a hundredth of its time.
const statsCountSpacing = 100

// countSpacing is how long after a count that took took the next one is
// due: StatsInterval, or statsCountSpacing times took if that is longer.
func countSpacing(interval, took time.Duration) time.Duration {
	return max(interval, statsCountSpacing*took)
}

// readCounts counts the unpublished (backlog) and dead rows.
func (r *Relay) readCounts(ctx context.Context) (backlog, dead int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
	defer cancel()
	if err := r.db.QueryRowContext(ctx, r.sql.statsCounts).Scan(&backlog, &dead); err != nil {
		return 0, 0, fmt.Errorf("count the backlog: %w", err)
	}
	return backlog, dead, nil
}

// readLag is the age of the oldest unpublished row by the database clock,
// 0 when there is none.
func (r *Relay) readLag(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
	defer cancel()
	var (
		oldest sql.NullTime
		now    time.Time
	)
	if err := r.db.QueryRowContext(ctx, r.sql.statsLag).Scan(&oldest, &now); err != nil {
		return 0, fmt.Errorf("read the lag: %w", err)
	}
	if !oldest.Valid {
		return 0, nil
	}
	return max(now.Sub(oldest.Time), 0), nil
}
