package relay

import (
	"context"
	"database/sql"
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

// statsLoop refreshes the gauges' figures every StatsInterval.
func (r *Relay) statsLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.StatsInterval)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
		s, err := r.Stats(sctx)
		cancel()
		if err == nil {
			r.met.setStats(s)
		} else if ctx.Err() == nil {
			r.log.Debug("relay: read stats", "err", err)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}
