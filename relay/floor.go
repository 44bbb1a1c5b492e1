package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
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
	db       *sql.DB
	sql      *statements
	interval time.Duration // HeartbeatInterval
	timeout  time.Duration // StatementTimeout
	log      *slog.Logger

	proof *outboxsql.ClaimFloorProof // the round's, until it holds
}

// run raises the floor every interval until ctx ends.
func (f *floorRaiser) run(ctx context.Context) {
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for tick(ctx, t.C) {
		if err := f.round(ctx); err != nil && ctx.Err() == nil {
			f.log.Debug("relay: claim floor round failed", "err", err)
			f.proof = nil
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
		var passed bool
		if err := f.db.QueryRowContext(ctx, f.sql.floorPassed, f.proof.PassedArgs()...).Scan(&passed); err != nil {
			return fmt.Errorf("check: %w", err)
		}
		if !passed {
			return nil
		}
		var floor int64
		switch err := f.db.QueryRowContext(ctx, f.sql.floorRaise, f.proof.RaiseArgs()...).Scan(&floor); {
		case errors.Is(err, sql.ErrNoRows):
			// Raised by another relay, lowered by an operator, or
			// already as high: start again.
		case err != nil:
			return fmt.Errorf("raise: %w", err)
		default:
			f.log.Debug("relay: claim floor raised", "floor", floor)
		}
		f.proof = nil
	}
	var p outboxsql.ClaimFloorProof
	if err := f.db.QueryRowContext(ctx, f.sql.floorStart).Scan(&p.MaxID, &p.XMax, &p.VXIDs, &p.Gen); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if p.Gen < 0 {
		return errNoFloor
	}
	f.proof = &p
	return nil
}
