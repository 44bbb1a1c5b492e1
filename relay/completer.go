package relay

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// completer records the outcome of publishes in the database (claimDB),
// in batches: one mark records the acknowledged rows since the last flush,
// and failed and released rows are recorded in the same transaction.
// Acknowledgements wait up to FlushInterval to fill a mark; failures and
// releases are recorded at once, since the lanes' fences wait for them.
//
// Rows stay counted in flight until their outcome is committed, which bounds
// memory while the database is unreachable: the claimer stops claiming,
// and the completer retries the same outcomes until they commit.
type completer struct {
	completerDeps

	mu       sync.Mutex
	acks     []*claimedRow
	fails    []failedRow
	releases []releasedRow
	closed   bool
	kick     chan struct{}
}

type releasedRow struct {
	row        *claimedRow
	onRecorded func(claimSeq uint64) // may be nil
}

type failedRow struct {
	row        *claimedRow
	err        string
	permanent  bool // the event's own fault (IsPermanent): it may go dead
	delay      time.Duration
	onRecorded func(claimSeq uint64)
}

// completerDeps is what the completer records with and who it tells.
type completerDeps struct {
	db        claimDB // records the outcomes
	cfg       Config
	log       *slog.Logger
	met       *metrics
	budget    *budget       // gets the rows back once their outcome is committed
	lastClaim func() uint64 // the number of the latest claim (claimer.lastSeq)
	// lockout: while the table is locked out, outcomes wait to be
	// recorded until it is not (or the relay stops).
	lockout *lockout
}

func newCompleter(d completerDeps) *completer {
	return &completer{completerDeps: d, kick: make(chan struct{}, 1)}
}

func (c *completer) ack(row *claimedRow) {
	c.mu.Lock()
	c.acks = append(c.acks, row)
	c.mu.Unlock()
	signal(c.kick)
}

// release returns a row unpublished; onRecorded, if not nil, runs once the
// release is committed, with the claim sequence number current then.
func (c *completer) release(row *claimedRow, onRecorded func(uint64)) {
	c.mu.Lock()
	c.releases = append(c.releases, releasedRow{row: row, onRecorded: onRecorded})
	c.mu.Unlock()
	signal(c.kick)
}

// fail records a failed publish; onRecorded runs once the failure is
// committed, with the claim sequence number current at that moment. A
// failure that is not the event's fault (an outage) backs off no longer
// than OutageBackoffMax, so events resume soon after the broker is back,
// and never makes the event dead.
func (c *completer) fail(row *claimedRow, err error, onRecorded func(uint64)) {
	msg := storableText(err.Error(), maxErrorText)
	limit := c.cfg.BackoffMax
	permanent := IsPermanent(err)
	if !permanent {
		limit = min(limit, c.cfg.OutageBackoffMax)
	}
	f := failedRow{
		row:        row,
		err:        msg,
		permanent:  permanent,
		delay:      backoff(row.attempts+1, c.cfg.BackoffMin, limit),
		onRecorded: onRecorded,
	}
	c.mu.Lock()
	c.fails = append(c.fails, f)
	c.mu.Unlock()
	signal(c.kick)
}

// close makes run flush what is left and return.
func (c *completer) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	signal(c.kick)
}

func (c *completer) run() {
	var (
		acks     []*claimedRow
		releases []releasedRow
		fails    []failedRow
		attempt  int
	)
	var (
		firstAck time.Time // when the oldest unflushed ack arrived
		linger   = time.NewTimer(time.Hour)
	)
	linger.Stop()
	for {
		select {
		case <-c.kick:
		case <-linger.C:
		}
		c.mu.Lock()
		if len(acks) == 0 && len(c.acks) > 0 {
			firstAck = time.Now()
		}
		acks = append(acks, c.acks...)
		releases = append(releases, c.releases...)
		fails = append(fails, c.fails...)
		c.acks, c.releases, c.fails = nil, nil, nil
		closed := c.closed
		c.mu.Unlock()

		// A mark costs about the same for 100 rows as for 1000: let
		// acknowledgements gather for up to FlushInterval, unless enough
		// are waiting or something else must be recorded now.
		if wait := c.cfg.FlushInterval - time.Since(firstAck); !closed && len(fails)+len(releases) == 0 &&
			len(acks) > 0 && len(acks) < c.flushAt() && wait > 0 {
			linger.Reset(wait)
			continue
		}
		if len(acks)+len(releases)+len(fails) > 0 {
			if !closed && c.lockout.locked() {
				// Recorded once the lock is gone; the rows stay counted
				// in flight meanwhile, so the claimer claims no more.
				select {
				case <-c.lockout.ended():
				case <-c.kick: // more to record, or close
				}
				signal(c.kick)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.StatementTimeout)
			err := c.flush(ctx, acks, fails, releases)
			cancel()
			if err != nil && !closed && c.lockout.hit(context.Background(), err) {
				signal(c.kick) // waits for the lock above
				continue
			}
			if err != nil {
				attempt++
				d := backoff(attempt, 50*time.Millisecond, 5*time.Second)
				c.log.Warn("relay: recording publish outcomes failed; retrying", "err", err, "rows", len(acks)+len(fails)+len(releases), "in", d)
				if closed && attempt >= 5 {
					// Shutting down with the database gone: the rows
					// stay claimed and are taken over once this relay's
					// heartbeat goes stale. Acknowledged ones are
					// published again (at least once).
					c.log.Error("relay: giving up recording outcomes at shutdown", "err", err)
					return
				}
				time.Sleep(d)
				signal(c.kick)
				continue
			}
			attempt = 0
			n := len(acks) + len(fails) + len(releases)
			var bytes int64
			for _, a := range acks {
				bytes += a.bytes
			}
			for _, f := range fails {
				bytes += f.row.bytes
			}
			for _, rel := range releases {
				bytes += rel.row.bytes
			}
			acks, releases, fails = acks[:0], releases[:0], fails[:0]
			c.budget.give(n, bytes)
		}
		if closed {
			c.mu.Lock()
			empty := len(c.acks)+len(c.releases)+len(c.fails) == 0
			c.mu.Unlock()
			if empty {
				return
			}
			signal(c.kick)
		}
	}
}

// flushAt is how many acknowledgements make a mark worth sending at once.
func (c *completer) flushAt() int { return max(c.cfg.BatchSize/2, 1) }

// flush commits the outcomes: acknowledgements alone in one mark (the
// common case, committed asynchronously: a lost mark only republishes),
// and with failures or releases in one durable transaction (settle),
// since those take rows out of memory (see outboxsql.SettleSettings).
func (c *completer) flush(ctx context.Context, acks []*claimedRow, fails []failedRow, releases []releasedRow) error {
	if len(fails) == 0 && len(releases) == 0 {
		if err := c.db.mark(ctx, refsOf(acks)); err != nil {
			return fmt.Errorf("mark %d published: %w", len(acks), err)
		}
		c.met.addByTopic(ctx, c.met.published, acks)
		return nil
	}
	s := settlement{fails: make([]rowFailure, len(fails)), maxAttempts: c.cfg.MaxAttempts,
		releases: make([]claimRef, len(releases)), marks: refsOf(acks)}
	for i, f := range fails {
		s.fails[i] = rowFailure{claimRef: refOf(f.row), err: f.err, permanent: f.permanent, delay: f.delay}
	}
	for i, rel := range releases {
		s.releases[i] = refOf(rel.row)
	}
	outcomes, err := c.db.settle(ctx, s)
	if err != nil {
		return fmt.Errorf("record outcomes: %w", err)
	}
	retried, dead := c.failed(fails, outcomes)
	recordedAt := c.lastClaim()
	for _, f := range fails {
		f.onRecorded(recordedAt)
	}
	for _, rel := range releases {
		if rel.onRecorded != nil {
			rel.onRecorded(recordedAt)
		}
	}
	c.met.addByTopic(ctx, c.met.published, acks)
	c.met.addByTopic(ctx, c.met.retried, retried)
	c.met.addByTopic(ctx, c.met.dead, dead)
	return nil
}

// failed logs the failures recorded and returns the rows that will be
// retried and those that became dead.
func (c *completer) failed(fails []failedRow, outcomes []failOutcome) (retried, dead []*claimedRow) {
	byID := make(map[int64]*claimedRow, len(fails))
	for _, f := range fails {
		byID[f.row.id] = f.row
	}
	for _, o := range outcomes {
		if o.dead {
			dead = append(dead, byID[o.id])
			c.log.Error("relay: event is dead: the broker refused it, and it failed MaxAttempts times", "row", o.id, "max_attempts", c.cfg.MaxAttempts)
		} else {
			retried = append(retried, byID[o.id])
		}
	}
	for _, f := range fails {
		c.log.Warn("relay: publish failed", "row", f.row.id, "event_id", f.row.event.ID, "topic", f.row.event.Topic,
			"aggregate_id", f.row.event.AggregateID, "attempt", f.row.attempts+1, "permanent", f.permanent, "err", f.err)
	}
	return retried, dead
}

// maxErrorText bounds the error text kept in last_error.
const maxErrorText = 2000

// storableText makes s something PostgreSQL stores as text: no NUL bytes
// (text cannot hold them, and jsonb refuses \u0000), valid UTF-8, at most
// max bytes cut at a character boundary. Error texts come from publishers
// and brokers; one a statement refuses would fail every flush after it.
func storableText(s string, max int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
