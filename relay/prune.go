package relay

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// pruner deletes published rows older than Retention, a batch per
// statement so no delete holds many locks or a long transaction. An advisory
// lock lets one relay prune at a time; the others skip the round.
type pruner struct {
	db      pruneDB
	cfg     Config // Retention, PruneInterval, PruneBatch, StatementTimeout
	log     *slog.Logger
	lockout *lockout // no prune runs while the table is locked out
}

// run prunes every PruneInterval until ctx ends, unless Retention is
// negative.
func (p *pruner) run(ctx context.Context) {
	if p.cfg.Retention < 0 {
		return
	}
	// The first prune comes between one and two intervals after the
	// start: spread like the other rounds (see spreadTicker), and never
	// sooner than PruneInterval, which a long one keeps out of the way of
	// a maintenance job calling Prune.
	if !publish.Sleep(ctx, randomPhase(p.cfg.PruneInterval)) {
		return
	}
	t := time.NewTicker(p.cfg.PruneInterval)
	defer t.Stop()
	for tick(ctx, t.C) {
		if p.lockout.locked() {
			continue
		}
		n, err := p.prune(ctx)
		if err != nil && ctx.Err() == nil && !p.lockout.hit(ctx, err) {
			p.log.Warn("relay: prune failed", "err", err)
		}
		if n > 0 {
			p.log.Info("relay: pruned published events", "rows", n, "older_than", p.cfg.Retention)
		}
	}
}

// Prune deletes published rows older than the retention window now, in
// batches, unless another relay is pruning, and returns how many it deleted.
// Run calls it every PruneInterval; call it directly from a maintenance job
// if you prefer.
func (r *Relay) Prune(ctx context.Context) (int64, error) { return r.pruner.prune(ctx) }

// prune is Prune. On a partitioned outbox (docs/partitions.md) it first
// maintains the partitions, then deletes row by row only in the partitions
// that are not dropped whole: those kept by dead rows, and the default.
func (p *pruner) prune(ctx context.Context) (int64, error) {
	st, err := p.state(ctx)
	if err != nil {
		return 0, fmt.Errorf("prune: %w", err)
	}
	if !st.partitioned || !st.owner {
		// A role that may not drop partitions may not delete from them
		// directly either: it prunes through the parent, row by row.
		return p.deleteAll(ctx, "")
	}
	kept, err := p.partitions(ctx, st)
	if err != nil {
		return 0, fmt.Errorf("prune: %w", err)
	}
	var total int64
	for _, leaf := range kept {
		n, err := p.deleteAll(ctx, leaf)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// state reads what the round starts from, within StatementTimeout.
func (p *pruner) state(ctx context.Context) (pruneState, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StatementTimeout)
	defer cancel()
	return p.db.pruneState(ctx)
}

// partitions creates the partitions ahead and drops those past retention,
// unless another relay is at it (the prune lock, held by a session
// meanwhile), and returns the partitions to prune row by row: those kept
// by dead rows, and the default one. A partition whose drop failed is
// left whole to the next round.
func (p *pruner) partitions(ctx context.Context, st pruneState) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.PruneInterval+p.cfg.StatementTimeout)
	defer cancel()
	round, err := p.db.maintainPartitions(ctx, partitionParams{maxID: st.maxID, floor: st.floor, retention: p.cfg.Retention})
	if err != nil || !round.locked {
		return nil, err // another relay maintains them; this one prunes nothing this round
	}
	if st.maxID >= round.top {
		p.log.Warn("relay: writers outran the partitions ahead; their rows went to the default partition",
			"max_id", st.maxID, "partitions_end", round.top)
	}
	if len(round.created) > 0 {
		p.log.Info("relay: created outbox partitions", "partitions", round.created)
	}
	if round.createErr != nil {
		p.log.Warn("relay: partitions not created ahead; the next round tries again", "err", round.createErr)
	}
	if len(round.dropped) > 0 {
		p.log.Info("relay: dropped outbox partitions past retention", "partitions", round.dropped)
	}
	if round.dropErr != nil {
		p.log.Warn("relay: partition not dropped; the next round tries again", "err", round.dropErr)
	}
	return round.kept, nil
}

// deleteAll deletes published rows past retention from partition (empty:
// the table), a batch per transaction, until a batch comes short.
func (p *pruner) deleteAll(ctx context.Context, partition string) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		n, locked, err := p.batch(ctx, partition)
		total += n
		if err != nil {
			return total, err
		}
		if !locked || n < int64(p.cfg.PruneBatch) {
			return total, nil
		}
	}
	return total, ctx.Err()
}

// batch deletes one batch, if it gets the prune lock.
func (p *pruner) batch(ctx context.Context, partition string) (deleted int64, locked bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StatementTimeout)
	defer cancel()
	deleted, locked, err = p.db.pruneBatch(ctx, pruneParams{partition: partition, retention: p.cfg.Retention, batch: p.cfg.PruneBatch})
	if err != nil {
		return 0, locked, fmt.Errorf("prune: %w", err)
	}
	return deleted, locked, nil
}
