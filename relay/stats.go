package relay

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// Stats reads the relay's outbox stats (see txoutbox.ReadStats). On
// MySQL it reads the counts and lags the relay's gauges read: counts are
// exact up to txoutbox.StatsExactMax and not estimated beyond it (the
// Estimated flags say a count reached it), and NextScheduled is not read.
func (r *Relay) Stats(ctx context.Context) (txoutbox.Stats, error) {
	if r.mysqlStats != nil {
		return r.mysqlStats.stats(ctx)
	}
	return txoutbox.ReadStats(ctx, r.db, r.cfg.Table)
}

// stats reads Relay.Stats on MySQL, on one connection; while the table is
// locked out it fails with errLockedOut.
func (m *mysqlHouseDB) stats(ctx context.Context) (txoutbox.Stats, error) {
	conn, err := m.tx.conn(ctx)
	if err != nil {
		return txoutbox.Stats{}, fmt.Errorf("read outbox stats: %w", err)
	}
	c := &mysqlStatsConn{db: m, conn: conn}
	defer c.close()
	const most = txoutbox.StatsExactMax
	var s txoutbox.Stats
	unpublished, scheduled, err := c.backlog(ctx, most)
	if err != nil {
		return txoutbox.Stats{}, fmt.Errorf("read outbox stats: %w", err)
	}
	if s.Dead, err = c.dead(ctx, most); err != nil {
		return txoutbox.Stats{}, fmt.Errorf("read outbox stats: %w", err)
	}
	lag, err := c.lag(ctx, most)
	if err != nil {
		return txoutbox.Stats{}, fmt.Errorf("read outbox stats: %w", err)
	}
	s.Backlog, s.Scheduled = max(unpublished-scheduled, 0), scheduled
	s.BacklogEstimated, s.ScheduledEstimated, s.DeadEstimated = unpublished >= most, scheduled >= most, s.Dead >= most
	if lag.oldest.Valid {
		s.Lag = max(lag.now.Sub(lag.oldest.Time), 0)
	}
	if lag.due.Valid {
		s.DueLag = max(lag.now.Sub(lag.due.Time), 0)
	}
	return s, nil
}

// sampler reads the figures of the outbox gauges: the lags, the backlog
// with the scheduled count and the dead count.
type sampler struct {
	db      statsDB
	cfg     Config // StatsInterval, StatementTimeout
	log     *slog.Logger
	met     *metrics
	lockout *lockout // no reading runs while the table is locked out
}

// run refreshes the gauges' figures until ctx ends: the lag, the
// backlog with the scheduled count and the dead count, each read apart (see paced), so that a slow
// count never holds up the lag. The lag is one index entry away and read
// every StatsInterval. A count reads an entry of every row it counts up
// to txoutbox.StatsExactMax and estimates the rest (see
// outboxsql.BacklogCount and DeadCount), so a reading costs at most that
// many index entries whatever the backlog; the pacing still spaces out a
// reading that turns slow (a server under load, an index bloated by a
// drain before its vacuum).
func (s *sampler) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, read := range []func(context.Context, statsConn) error{
		s.readLag,
		s.readBacklog,
		s.readDead,
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paced(ctx, s.cfg.StatsInterval, func(ctx context.Context) time.Duration {
				if s.lockout.locked() {
					return 0 // the gauges keep their last figures
				}
				took, err := s.timed(ctx, read)
				if err != nil && ctx.Err() == nil && !s.lockout.hit(ctx, err) {
					s.log.Debug("relay: read stats", "err", err)
				}
				return took
			})
		}()
	}
	wg.Wait()
}

// timed runs read on a connection of its own and returns how long read
// took: the statement, not the wait for a connection or for opening one,
// which say nothing of what it costs the server. A read the
// StatementTimeout cut short took that long.
func (s *sampler) timed(ctx context.Context, read func(context.Context, statsConn) error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StatementTimeout)
	defer cancel()
	conn, err := s.db.statsConn(ctx)
	if err != nil {
		return 0, fmt.Errorf("read stats: %w", err)
	}
	defer conn.close()
	start := time.Now()
	err = read(ctx, conn)
	return time.Since(start), err
}

// statsSpacing is how many times as long as its last statement a stats
// reading waits, from the start of that statement, before it runs again:
// a reading whose statement takes longer than a hundredth of
// StatsInterval then runs a hundredth of the time (of each replica's
// time, and more of the server's CPU where PostgreSQL adds parallel
// workers to a count).
const statsSpacing = 100

// statsQuick is the duration under which a reading is not spaced out
// whatever StatsInterval: such a statement costs the server little, and
// the first on a fresh connection (planning, the catalog caches) can take
// a few milliseconds that say nothing of the next ones. With the default
// StatsInterval only statements over 100 ms are spaced out anyway.
const statsQuick = 25 * time.Millisecond

// paced runs read until ctx ends: at once, then every interval (the
// second time at a random point of the first interval), and after a run
// whose statement took d (read's result) of statsQuick or more no sooner
// than statsSpacing × d after that run started.
func paced(ctx context.Context, interval time.Duration, read func(context.Context) time.Duration) {
	t := time.NewTimer(0)
	defer t.Stop()
	for first := true; tick(ctx, t.C); first = false {
		start := time.Now()
		took := read(ctx)
		next := spacing(interval, took)
		if first {
			// The second reading at a random point of the interval (see
			// spreadTicker), no sooner than a slow first one allows.
			next = randomPhase(interval)
			if took >= statsQuick {
				next = max(next, statsSpacing*took)
			}
		}
		t.Reset(time.Until(start.Add(next)))
	}
}

// spacing is how long after the start of a reading whose statement took
// took the next one starts.
func spacing(interval, took time.Duration) time.Duration {
	if took < statsQuick {
		return interval
	}
	return max(interval, statsSpacing*took)
}

// readLag sets the lag gauges: how long the oldest due unpublished row has
// been due, by the database clock (see outboxsql.OldestUnpublished), and
// the oldest of those not held behind a scheduled row (outboxsql.OldestDue,
// which walks txoutbox.StatsExactMax held rows at most). With no
// unpublished row it also sets the backlog and scheduled gauges to 0,
// which a count that is slow to come round again would otherwise leave as
// it was.
func (s *sampler) readLag(ctx context.Context, conn statsConn) error {
	l, err := conn.lag(ctx, txoutbox.StatsExactMax)
	if err != nil {
		return fmt.Errorf("read the lag: %w", err)
	}
	if !l.oldest.Valid {
		s.met.setLags(0, 0)
		s.met.setBacklog(0)
		s.met.setScheduled(0)
		return nil
	}
	var dueLag time.Duration
	if l.due.Valid {
		dueLag = max(l.now.Sub(l.due.Time), 0)
	}
	s.met.setLags(max(l.now.Sub(l.oldest.Time), 0), dueLag)
	return nil
}

// readBacklog sets the backlog and scheduled gauges from one statement: the
// unpublished rows (outboxsql.StatsBacklog) and the scheduled ones among
// them (outboxsql.ScheduledCount), which the backlog leaves out, each
// counted up to txoutbox.StatsExactMax.
func (s *sampler) readBacklog(ctx context.Context, conn statsConn) error {
	unpublished, scheduled, err := conn.backlog(ctx, txoutbox.StatsExactMax)
	if err != nil {
		return fmt.Errorf("count the backlog: %w", err)
	}
	c := outboxsql.CountsOf(unpublished, 0, scheduled)
	s.met.setBacklog(c.Backlog)
	s.met.setScheduled(c.Scheduled)
	return nil
}

// readDead sets the dead gauge: the dead rows (outboxsql.StatsDead),
// counted up to txoutbox.StatsExactMax and estimated beyond
// (outboxsql.CountArgs).
func (s *sampler) readDead(ctx context.Context, conn statsConn) error {
	n, err := conn.dead(ctx, txoutbox.StatsExactMax)
	if err != nil {
		return fmt.Errorf("count the dead rows: %w", err)
	}
	s.met.setDead(n)
	return nil
}
