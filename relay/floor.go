package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// floorRaiser raises the claim floor (outboxsql.ClaimFloorStart), the id the
// claim walks the first attempts from, so claims do not read the index
// entries of the rows published since the last VACUUM: on a drained
// backlog of millions, every claim read them all. Each round is one or two
// short statements: it starts a proof, or checks the one it started and,
// once it holds, raises the floor and starts the next. Every relay runs
// rounds; the floor's generation lets one of them, or an operator's retry
// or replay, win a race, and the others start again. A failed round only
// leaves the floor where it is, which costs claims reads, not events.
type floorRaiser struct {
	db       floorDB
	interval time.Duration // HeartbeatInterval
	timeout  time.Duration // StatementTimeout
	log      *slog.Logger
	lockout  *lockout // no round runs while the table is locked out

	proof *floorProof // the round's, until it holds

	// low is the claims' Low on a partitioned outbox (outboxsql.ClaimLow),
	// found again each round; it stays 0 for one table, whose rounds list
	// the partitions again only once oneTableUntil has passed.
	low *atomic.Int64
	// oneTableUntil: the last listing found one table, not partitions;
	// until then the rounds do not list again. A table becomes partitioned
	// only by a conversion, and a Low of 0 is right for any table.
	oneTableUntil time.Time

	// claimed counts the rows the relay's claims took (the claimer adds
	// them). A round starts a proof once
	// perProof rows were taken since the last start, or floorQuietRounds
	// rounds passed: until a batch's worth of rows was published past the
	// floor, a claim reads fewer entries more than the round costs. A
	// hundred tenants' tables written ten times a second each
	// (tenant-fairness) ran a proof every round each, two reads of pg_locks
	// a round; this way, one every floorQuietRounds rounds.
	claimed   *atomic.Int64
	perProof  int64     // BatchSize
	lastStart time.Time // of the last proof

	// repair runs its round after each of the floor's: both keep what
	// the claims read small and clear, and taking turns they hold one
	// connection at a time. Nil: none.
	repair *repairer
}

// floorQuietRounds is how many rounds may pass without a proof when the
// relay claims fewer than a batch of rows in them.
const floorQuietRounds = 10

// partitionsRelist is how long a floor round trusts a listing that found
// one table: in a group of 100 tables, listing every round would be 50
// catalog queries a second for an answer that changes once, if ever.
const partitionsRelist = time.Minute

// run raises the floor every interval until ctx ends, and runs the
// repair's round after each.
func (f *floorRaiser) run(ctx context.Context) {
	t := newSpreadTicker(f.interval)
	defer t.Stop()
	for t.tick(ctx) {
		if f.lockout.locked() {
			continue
		}
		if err := f.round(ctx); err != nil && ctx.Err() == nil {
			f.lockout.hit(ctx, err)
			f.log.Debug("relay: claim floor round failed", "err", err)
			f.proof = nil
			f.lastStart = time.Time{} // start the next proof at once
		}
		if err := f.findLow(ctx); err != nil && ctx.Err() == nil {
			f.lockout.hit(ctx, err)
			f.log.Debug("relay: claim bound round failed", "err", err)
		}
		if f.repair != nil {
			f.repair.tick(ctx)
		}
	}
}

// errNoFloor: the table's schema is older than version 8; the claim
// cannot run there either, so the rounds stop being useful.
var errNoFloor = errors.New("no claim floor table (schema version 8)")

// round checks the pending proof and, when it holds, raises the floor;
// then starts a proof if none is pending.
func (f *floorRaiser) round(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if f.proof != nil {
		passed, err := f.db.floorPassed(ctx, *f.proof)
		if err != nil {
			return fmt.Errorf("check: %w", err)
		}
		if !passed {
			return nil
		}
		switch floor, raised, err := f.db.floorRaise(ctx, *f.proof); {
		case err != nil:
			return fmt.Errorf("raise: %w", err)
		case !raised:
			// Raised by another relay, lowered by an operator, or
			// already as high: start again.
		default:
			f.log.Debug("relay: claim floor raised", "floor", floor)
		}
		f.proof = nil
	}
	taken := f.claimed.Load()
	if taken < f.perProof && time.Since(f.lastStart) < floorQuietRounds*f.interval {
		return nil
	}
	p, err := f.db.floorStart(ctx)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if p.gen < 0 {
		return errNoFloor
	}
	f.claimed.Add(-taken)
	f.lastStart = time.Now()
	if !p.idle { // an idle table's proof could raise nothing
		f.proof = &p
	}
	return nil
}

// findLow sets the claims' Low: on a partitioned outbox, the lower bound
// of the first partition that may hold an unpublished row, so claims leave
// the drained partitions below it out when they start (outboxsql.ClaimLow).
// A failed round leaves the last one: a claim checks it in its own
// snapshot, and takes nothing (then reads every partition until the next
// round) where it no longer holds.
func (f *floorRaiser) findLow(ctx context.Context) error {
	if f.low == nil || time.Now().Before(f.oneTableUntil) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	ranges, err := f.db.claimRanges(ctx)
	if err != nil {
		return err
	}
	if len(ranges) == 0 { // one table: no statement more for a while
		f.low.Store(0)
		f.oneTableUntil = time.Now().Add(partitionsRelist)
		return nil
	}
	floor, err := f.db.floorRead(ctx)
	if err != nil {
		return fmt.Errorf("claim bound: %w", err)
	}
	low := floor
	var below []idRange // wholly below the floor: only retries may be unpublished there
	for _, r := range ranges {
		if r.to <= floor {
			below = append(below, r)
		} else if r.from <= floor {
			low = min(low, r.from) // the floor's partition
		}
	}
	if len(below) > 0 {
		first, ok, err := f.db.firstUnpublished(ctx, below)
		if err != nil {
			return fmt.Errorf("claim bound: %w", err)
		}
		if ok {
			low = min(low, first)
		}
	}
	f.low.Store(max(low, 0))
	return nil
}
