package relay

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// probeBackoffMin is the first wait before a locked-out table's probe; the
// waits double from it up to HeartbeatInterval.
const probeBackoffMin = 100 * time.Millisecond

// errLockedOut is what a relay's loops are told instead of running a
// statement on their table while it is locked out.
var errLockedOut = errors.New("relay: the table is locked out: a statement on it gave up on a lock another session holds")

// lockout follows the statements on the relay's table that gave up on a
// lock another session holds (tableDB.lockWait: on PostgreSQL, SQLSTATE
// 55P03, lock_not_available), after Config.LockTimeout. The first starts
// an episode: the table is locked out, the relay's loops run nothing on it
// (they wait, or skip their rounds), and the probe loop runs
// tableDB.probe, which takes the locks the relay's statements need
// without waiting, every backoff step up to HeartbeatInterval; the episode
// ends when a probe passes. So a locked table holds the pool's connections
// only for the LockTimeout of the statements that found the lock, and then
// for a moment each step. Each episode is logged once, at its start and
// its end, by log, which names the table.
type lockout struct {
	db    tableDB // probes, and tells a lock given up on
	clock *clock
	log   *slog.Logger
	met   *metrics
	lock  time.Duration // Config.LockTimeout, for the log
	step  time.Duration // Config.HeartbeatInterval: the probes' longest wait

	start chan struct{} // signalled when an episode starts

	mu    sync.Mutex
	on    bool
	since time.Duration // when the episode started, on the relay's clock
	over  chan struct{} // closed when the episode ends; closed while none
}

func newLockout(db tableDB, c *clock, log *slog.Logger, met *metrics, cfg Config) *lockout {
	l := &lockout{db: db, clock: c, log: log, met: met, lock: cfg.LockTimeout, step: cfg.HeartbeatInterval,
		start: make(chan struct{}, 1)}
	l.reset()
	return l
}

// reset starts a Run with the table not locked out.
func (l *lockout) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.over == nil || l.on {
		l.over = make(chan struct{})
		close(l.over)
	}
	l.on = false
	select {
	case <-l.start:
	default:
	}
}

// hit reports whether err is a lock timeout, or errLockedOut: the loop that
// got it says nothing more, the episode is logged here. A lock timeout
// counts, and starts an episode unless one is on.
func (l *lockout) hit(ctx context.Context, err error) bool {
	if errors.Is(err, errLockedOut) {
		return true
	}
	if !l.db.lockWait(err) {
		return false
	}
	l.met.lockTimeouts.Add(context.WithoutCancel(ctx), 1, l.met.table)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.on {
		return true
	}
	l.on, l.since = true, l.clock.now()
	l.over = make(chan struct{})
	signal(l.start)
	l.log.Warn("relay: a statement on the table gave up on a lock another session holds (an ALTER TABLE, a VACUUM FULL, a migration?); "+
		"running nothing on the table until the lock is gone",
		"lock_timeout", l.lock, "err", err)
	return true
}

// locked reports whether the table is locked out.
func (l *lockout) locked() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.on
}

// ended returns a channel closed once the table is not locked out: at
// once while it is not.
func (l *lockout) ended() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.over
}

// wait waits until the table is not locked out, and reports whether ctx
// is still live.
func (l *lockout) wait(ctx context.Context) bool {
	select {
	case <-l.ended():
		return true
	case <-ctx.Done():
		return false
	}
}

// lasted returns how long the table has been locked out, zero while it is
// not.
func (l *lockout) lasted() time.Duration {
	_, d := l.state()
	return d
}

// state reports whether the table is locked out, and for how long.
func (l *lockout) state() (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.on {
		return false, 0
	}
	return true, l.clock.now() - l.since
}

// run probes the table while it is locked out, until ctx ends.
func (l *lockout) run(ctx context.Context) {
	for {
		select {
		case <-l.start:
		case <-ctx.Done():
			return
		}
		for n := 1; l.locked(); n++ {
			if !publish.Sleep(ctx, backoff(n, min(probeBackoffMin, l.step), l.step)) {
				return
			}
			err := l.db.probe(ctx)
			if err == nil {
				l.end()
				break
			}
			if !l.db.lockWait(err) && !errors.Is(err, errGateHeld) && ctx.Err() == nil {
				l.log.Debug("relay: probe the locked-out table", "err", err)
			}
		}
	}
}

// end ends the episode.
func (l *lockout) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.on {
		return
	}
	l.on = false
	close(l.over)
	l.log.Info("relay: the lock on the table is gone; resuming", "locked_out_for", (l.clock.now() - l.since).Round(time.Millisecond))
}
