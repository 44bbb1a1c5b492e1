package relay

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// repairer repairs the rows no relay wrote that fill the claims' window:
// rows in backoff by next_attempt_at alone, which the claim reads as due
// and cannot take, so that a batch of them held back every aggregate of
// the shards behind them (outboxsql.RepairRetryAt says which rows, and
// why the repair changes nothing they wait for). It reads what one claim
// reads, in a round of its own after the claim floor's (floorRaiser.run,
// so the relay's loops hold no more connections at once): the first round
// the relay has shards, each round its shards changed, and every
// repairRounds rounds, so a table written to by a relay of schema version
// 3 or 4 (during an upgrade) or restored from an older dump while the
// relay runs is repaired within repairRounds heartbeats. It names what it
// repaired once per episode (the rounds in a row that repair rows), with
// the rows never due apart: those hold back their aggregates until an
// operator acts.
type repairer struct {
	db repairDB
	// members gives the shards the claims read (*membership).
	members interface {
		claimable() (*incarnation, []int16)
	}
	window  int           // BatchSize: the rows a claim reads of each kind
	timeout time.Duration // StatementTimeout
	log     *slog.Logger  // names the relay and the table
	met     *metrics
	lockout *lockout // a lock timeout locks the table out

	shards []int16 // those of the last repair
	rounds int     // since it
	// episode counts the rows repaired in the rounds in a row that
	// repaired some, named those of them the episode's first line named.
	episode, named int
}

// repairRounds is how many rounds pass between two repairs while the
// relay's shards do not change: a claim's reads every 20s at the default
// HeartbeatInterval, for a state no relay writes.
const repairRounds = 10

// repairNamed is how many row ids a log line names at most.
const repairNamed = 20

// tick runs a round, logging its failure.
func (r *repairer) tick(ctx context.Context) {
	if err := r.round(ctx); err != nil && ctx.Err() == nil {
		r.lockout.hit(ctx, err)
		r.log.Debug("relay: repair round failed", "err", err)
	}
}

// round repairs if the shards changed since the last repair or
// repairRounds rounds passed. It repairs again while a repair finds rows
// (the window then holds the next ones), up to repairRuns times, and in
// the next round too if that did not clear it. A failed repair waits for
// the next like one that succeeded: a table the repair cannot run on is
// one the claim cannot run on either, whose errors the claimer logs.
func (r *repairer) round(ctx context.Context) error {
	_, shards := r.members.claimable()
	if len(shards) == 0 {
		return nil
	}
	if r.rounds++; r.rounds < repairRounds && slices.Equal(shards, r.shards) {
		return nil
	}
	r.rounds, r.shards = 0, shards
	var rows []repairedRow
	for i := range repairRuns {
		got, err := r.repair(ctx, shards)
		if err != nil {
			if len(rows) > 0 { // what the earlier runs repaired is committed
				r.report(ctx, rows)
			}
			return err
		}
		if rows = append(rows, got...); len(got) == 0 {
			break
		}
		if i == repairRuns-1 {
			r.rounds = repairRounds // not cleared yet: go on next round
		}
	}
	r.report(ctx, rows)
	return nil
}

// repairRuns is how many repairs a round runs at most: a window each, so
// a round repairs a few batches' worth of rows, and a table holding
// millions of them is repaired over many rounds.
const repairRuns = 20

// repairedRow is a row the repair gave a retry_at, and when it is due
// (invalid: never).
type repairedRow struct {
	id  int64
	due sql.NullTime
}

// repair repairs the rows of the window of shards (repairDB.repair) and
// returns them in id order.
func (r *repairer) repair(ctx context.Context, shards []int16) ([]repairedRow, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	rows, err := r.db.repair(ctx, repairParams{window: r.window, shards: shards})
	if err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	return rows, nil
}

// report counts the rows repaired and names them, once per episode: the
// first round that repaired rows names them at Warn, the next ones at
// Debug, and the first round that repaired none ends the episode with how
// many more were repaired since the first.
func (r *repairer) report(ctx context.Context, rows []repairedRow) {
	if len(rows) == 0 {
		if r.episode > r.named {
			r.log.Info("relay: repaired rows no relay writes: no more found; more were repaired after the warning",
				"rows", r.episode-r.named, "in_all", r.episode)
		}
		r.episode, r.named = 0, 0
		return
	}
	r.met.repaired.Add(ctx, int64(len(rows)), r.met.table)
	first := r.episode == 0
	r.episode += len(rows)
	var (
		ids, never []int64
		until      time.Time
	)
	for _, row := range rows {
		if len(ids) < repairNamed {
			ids = append(ids, row.id)
		}
		if !row.due.Valid {
			never = append(never, row.id)
		} else if row.due.Time.After(until) {
			until = row.due.Time
		}
	}
	if !first {
		r.log.Debug("relay: repaired rows no relay writes", "rows", len(rows), "ids", ids)
	} else {
		r.named = len(rows)
		kv := []any{"rows", len(rows), "ids", ids}
		if !until.IsZero() {
			kv = append(kv, "due_until", until)
		}
		r.log.Warn("relay: repaired rows no relay writes: in backoff by next_attempt_at alone (restored from a dump older than schema version 5, "+
			"inserted by hand, or failed by a relay of version 3 or 4), the claims read them and could not take them, and enough of them "+
			"held back every other aggregate; retry_at is now their next_attempt_at: each still waits until then, "+
			"holding back its own aggregate's later events only",
			kv...)
	}
	if len(never) > 0 {
		r.log.Error("relay: rows never due (next_attempt_at 'infinity') hold back their aggregates' later events until an operator sets their next_attempt_at and retry_at",
			"rows", len(never), "ids", never[:min(len(never), repairNamed)])
	}
}
