package relay

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// pruner deletes published rows older than Retention, a batch per
// statement so no delete holds many locks or a long transaction. An advisory
// lock lets one relay prune at a time; the others skip the round.
type pruner struct {
	db  *sql.DB
	sql *statements
	cfg Config // Retention, PruneInterval, PruneBatch, StatementTimeout
	log *slog.Logger
}

// run prunes every PruneInterval until ctx ends, unless Retention is
// negative.
func (p *pruner) run(ctx context.Context) {
	if p.cfg.Retention < 0 {
		return
	}
	t := time.NewTicker(p.cfg.PruneInterval)
	defer t.Stop()
	for tick(ctx, t.C) {
		n, err := p.prune(ctx)
		if err != nil && ctx.Err() == nil {
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

// prune is Prune.
func (p *pruner) prune(ctx context.Context) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		n, locked, err := p.batch(ctx)
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
func (p *pruner) batch(ctx context.Context) (deleted int64, locked bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StatementTimeout)
	defer cancel()
	_, err = settle(ctx, p.db, p.sql, p.cfg.StatementTimeout, func(tx *sql.Tx) (int64, error) {
		if err := tx.QueryRowContext(ctx, p.sql.pruneLock).Scan(&locked); err != nil {
			return 0, fmt.Errorf("lock: %w", err)
		}
		if !locked {
			return 0, nil
		}
		res, err := tx.ExecContext(ctx, p.sql.prune, outboxsql.PruneArgs{Retention: p.cfg.Retention, Batch: p.cfg.PruneBatch}.Args()...)
		if err != nil {
			return 0, fmt.Errorf("delete: %w", err)
		}
		deleted, err = res.RowsAffected()
		return deleted, err
	})
	if err != nil {
		return 0, locked, fmt.Errorf("prune: %w", err)
	}
	return deleted, locked, nil
}
