package relay

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// After a NOTIFY, or a claim that found rows, the claimer polls again
// hotPollInterval later (or Config.ClaimCooldown, if longer), and as often
// while the polls find rows; once one finds nothing, it polls once more at
// the end of hotPollWindow (from the last claim that found rows) and then
// waits.
// Writers send at most one NOTIFY per txoutbox.WriterConfig.NotifyInterval
// (50ms by default), so rows committed just after a NOTIFY are found
// within tens of milliseconds instead of at the next PollInterval. A
// writer fast enough to leave rows unannounced keeps the polls finding
// rows, every hotPollInterval; one announcing every row (slower than one
// per NotifyInterval) costs two empty polls a NOTIFY. Polling at doubling
// intervals instead cost four, and a hundred tables written ten times a
// second each (tenant-fairness) spent most of the relay's statements on
// them.
const (
	hotPollInterval = 10 * time.Millisecond
	hotPollWindow   = 100 * time.Millisecond
)

// claimedRow is one claimed outbox row on its way through the relay.
type claimedRow struct {
	id       int64
	event    txoutbox.Event
	attempts int          // failed publishes before this claim
	seq      uint64       // the claim that took it
	inc      *incarnation // the incarnation that claimed it
	version  claimVersion // the claim's: its settlement's fence (claimDB)
	bytes    int64        // its payload's size, counted in the budget
	// leaseEnds is when the lanes stop starting a publish of it, on the
	// relay's clock: the claim's start plus LeaseDuration less one
	// HeartbeatInterval, before the lease the database recorded ends and
	// any relay (this one too) may claim the row again (see lane.process).
	leaseEnds time.Duration
}

// claimer claims due rows and hands them to the lanes: the first step of
// every event's way through the relay. It alone claims (claimDB.claim),
// numbers the claims (seq), and keeps the rows of a claim whose commit was
// not confirmed until they are released.
type claimer struct {
	claimerDeps

	// seq numbers claims; rows carry the number of the claim that took
	// them, which the lanes' fences compare against.
	seq atomic.Uint64
	// unconfirmed holds the rows of a claim whose commit failed: it may have
	// committed without the reply arriving, leaving them claimed by the
	// incarnation with no lane publishing them. The next claim first
	// releases them. Only the claimer's goroutine touches it.
	unconfirmed []*claimedRow
}

// claimerDeps is what the claimer reads and who it tells.
type claimerDeps struct {
	db    claimDB // runs the claims and the releases of unconfirmed ones
	cfg   Config
	log   *slog.Logger
	met   *metrics
	clock *clock // the relay's: the rows' leaseEnds
	// members gives the incarnation to claim under and its shards
	// (*membership).
	members interface {
		claimable() (*incarnation, []int16)
	}
	stalled func() bool // the relay cannot make progress: claim nothing (stall.stalled)
	budget  *budget
	outage  *outage
	wake    <-chan struct{} // signalled by NOTIFY and new shards: claim now
	// low is the claim's Low on a partitioned outbox (outboxsql.ClaimLow),
	// which the floor rounds keep; 0 reads every partition.
	low *atomic.Int64
	// claimed counts the rows claimed, for the floor rounds.
	claimed *atomic.Int64
	// lockout: no claim runs while the table is locked out.
	lockout *lockout
}

func newClaimer(d claimerDeps) *claimer { return &claimer{claimerDeps: d} }

// lastSeq is the number of the latest claim.
func (c *claimer) lastSeq() uint64 { return c.seq.Load() }

// reset starts a Run with no unconfirmed claim: rows a Run before left
// claimed are its incarnation's, to be taken over.
func (c *claimer) reset() { c.unconfirmed = nil }

// run claims due rows and hands them to lanes until ctx ends. It claims
// the next batch while earlier ones publish (bounded by MaxInFlight), and
// waits for a NOTIFY, the poll interval or free capacity otherwise.
func (c *claimer) run(ctx context.Context, lanes laneSet) {
	poll := time.NewTicker(c.cfg.PollInterval)
	defer poll.Stop()
	hotPoll := max(hotPollInterval, c.cfg.ClaimCooldown)
	var (
		more     = true // the last claim was full: claim again at once
		dbErrors int
		hotUntil time.Time // poll until then
		hotEvery = hotPoll
		hot      = time.NewTimer(time.Hour)
		// shortAt is when the last claim began, if it came back short:
		// the next waits for ClaimCooldown after it.
		shortAt time.Time
	)
	defer hot.Stop()
	for ctx.Err() == nil {
		if c.lockout.locked() {
			if !c.lockout.wait(ctx) {
				return
			}
			// Rows may have committed while it lasted, their NOTIFYs
			// spent on a claim that could not run.
			more = true
			continue
		}
		free, freeBytes := c.budget.free()
		if free < c.claimAt() || (freeBytes < roomFor(c.cfg.BatchBytes, c.cfg.MaxInFlightBytes) && c.budget.held() > 0) {
			// Wait for room: claiming a sliver at a time costs a
			// round trip per sliver.
			select {
			case <-c.budget.freed:
			case <-poll.C:
			case <-ctx.Done():
				return
			}
			continue
		}
		if !more {
			if wait := time.Until(hotUntil); wait > 0 {
				hot.Reset(min(wait, hotEvery))
			}
			polled := false
			select {
			case <-c.wake:
				hotUntil = time.Now().Add(hotPollWindow)
				hotEvery = hotPoll
			case <-hot.C:
			case <-poll.C:
				polled = true
			case <-ctx.Done():
				return
			}
			if polled && !c.anyDue(ctx) {
				continue
			}
			// Under a steady stream of writes every NOTIFY would start a
			// claim of the few rows since the last: gather them instead.
			if wait := time.Until(shortAt.Add(c.cfg.ClaimCooldown)); wait > 0 && !publish.Sleep(ctx, wait) {
				return
			}
		}
		if n := c.outage.run(); n >= outageThreshold {
			// The last publishes all failed: the broker is likely down.
			// Back off before claiming more rows only to fail them. A
			// lone poison event retrying stays below the threshold.
			if !publish.Sleep(ctx, backoff(n-outageThreshold+1, 50*time.Millisecond, min(5*time.Second, c.cfg.OutageBackoffMax))) {
				return
			}
		}
		within := min(c.cfg.BatchBytes, max(freeBytes, 1)) // nothing held: one row, however large
		began := time.Now()
		rows, err := c.claimWithin(ctx, min(c.cfg.BatchSize, free), within)
		// Any claim is a poll: the next is due PollInterval after it, and
		// a hot poll armed before it (beaten by a NOTIFY or room freed) is
		// spent; the loop arms the next while the window lasts.
		poll.Reset(c.cfg.PollInterval)
		hot.Stop()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if c.lockout.hit(ctx, err) {
				more = true
				continue // the loop waits for the lock to go
			}
			dbErrors++
			d := backoff(dbErrors, 100*time.Millisecond, 10*time.Second)
			c.log.Warn("relay: claim failed; retrying", "err", err, "in", d)
			if !publish.Sleep(ctx, d) {
				return
			}
			more = true
			continue
		}
		dbErrors = 0
		var bytes int64
		for _, row := range rows {
			bytes += row.bytes
		}
		// Full in rows, or (likely) stopped by the byte budget.
		more = len(rows) == min(c.cfg.BatchSize, free) || (len(rows) > 0 && 2*bytes >= within)
		shortAt = time.Time{}
		if !more {
			shortAt = began
		}
		if len(rows) > 0 {
			c.met.batchSize.Record(ctx, int64(len(rows)), c.met.table)
			hotUntil = time.Now().Add(hotPollWindow)
			hotEvery = hotPoll
		} else {
			hotEvery = hotPollWindow // the rest of the window, then wait
		}
		c.budget.take(len(rows), bytes)
		for _, row := range rows {
			lanes.queue(row)
		}
	}
}

// anyDue reports whether a poll should claim: false only when the claimDB
// is a dueProber that found nothing a claim could take. A probe that
// fails claims, whose own errors are logged and retried; so does a claim
// whose commit was not confirmed, whose rows the next claim releases.
func (c *claimer) anyDue(ctx context.Context) bool {
	p, ok := c.db.(dueProber)
	if !ok || len(c.unconfirmed) > 0 {
		return true
	}
	due, err := p.anyDue(ctx)
	return err != nil || due
}

// claimAt is the room in flight (MaxInFlight less the rows held) the
// claimer waits for before it claims. With room for a batch beside a
// batch in flight, as by default, it is a full batch: every claim reads
// the rows the incarnation holds to pass over them (see outboxsql.Claim),
// so claiming fewer, fuller batches reads fewer of them per row taken.
// With less, it is half a batch, so that a few rows slow
// to settle cannot stop the relay from claiming. It is at least one row: a
// claim with no room would take nothing and, looking full, run again at
// once.
func (c *claimer) claimAt() int { return roomFor(c.cfg.BatchSize, c.cfg.MaxInFlight) }

// roomFor is claimAt's rule for a batch and a bound on what is held, in
// rows or in bytes (BatchBytes and MaxInFlightBytes).
func roomFor[T int | int64](batch, limit T) T {
	return max(1, min(batch, limit-batch), min(batch, limit)/2)
}

// claim claims up to limit rows within BatchBytes.
func (c *claimer) claim(ctx context.Context, limit int) ([]*claimedRow, error) {
	return c.claimWithin(ctx, limit, c.cfg.BatchBytes)
}

// claimWithin claims up to limit rows and bytes of
// payload (at least one row), and returns the rows in id order. Only the
// claimer's goroutine calls it.
func (c *claimer) claimWithin(ctx context.Context, limit int, bytes int64) ([]*claimedRow, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StatementTimeout)
	defer cancel()
	if len(c.unconfirmed) > 0 {
		if err := c.releaseUnconfirmed(ctx); err != nil {
			return nil, err
		}
	}
	inc, shards := c.members.claimable()
	if inc == nil || len(shards) == 0 || c.stalled() {
		return nil, nil
	}
	seq := c.seq.Add(1)
	// Before the statement is sent, so no later than the now() the
	// database starts the lease from.
	leaseEnds := c.clock.now() + c.cfg.LeaseDuration - c.cfg.HeartbeatInterval
	var low int64
	if c.low != nil {
		low = c.low.Load()
	}
	p := claimParams{owner: inc.token, limit: limit, bytes: bytes, lease: c.cfg.LeaseDuration, shards: shards, low: low}
	out, bad, err := c.db.claim(ctx, p)
	for _, row := range out {
		row.seq, row.inc, row.leaseEnds = seq, inc, leaseEnds
	}
	if err != nil {
		c.unconfirmed = out // rows only when its commit was not confirmed
		return nil, err
	}
	c.claimed.Add(int64(len(out)))
	if len(bad) > 0 {
		for _, b := range bad {
			c.log.Error("relay: event cannot be decoded; it is dead", "row", b.id, "err", b.err)
		}
		c.met.dead.Add(ctx, int64(len(bad)), c.met.table)
	}
	if len(out)+len(bad) == 0 && low > 0 {
		// The claim takes nothing where low no longer holds (an
		// operator's retry or replay below it): read every partition
		// until the next floor round finds low again.
		c.low.CompareAndSwap(low, 0)
	}
	return out, nil
}

// releaseUnconfirmed returns to pending the rows of a claim whose commit
// was not confirmed, if it committed after all, so they are claimed again in
// order instead of waiting for their lease. The release is durable before
// the incarnation claims again: until then the rows would count as held in
// its memory.
func (c *claimer) releaseUnconfirmed(ctx context.Context) error {
	n, err := c.db.release(ctx, refsOf(c.unconfirmed))
	if err != nil {
		return fmt.Errorf("release rows of an unconfirmed claim: %w", err)
	}
	if n > 0 {
		c.log.Warn("relay: released rows of a claim whose commit was not confirmed", "rows", n)
	}
	c.unconfirmed = nil
	return nil
}
