package relay

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// pruneLoop deletes published rows older than Retention, a batch per
// statement so no delete holds many locks or a long transaction. An advisory
// lock lets one relay prune at a time; the others skip the round.
func (r *Relay) pruneLoop(ctx context.Context) {
	if r.cfg.Retention < 0 {
		return
	}
	t := time.NewTicker(r.cfg.PruneInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		n, err := r.Prune(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("relay: prune failed", "err", err)
		}
		if n > 0 {
			r.log.Info("relay: pruned published events", "rows", n, "older_than", r.cfg.Retention)
		}
	}
}

// Prune deletes published rows older than the retention window now, in
// batches, unless another relay is pruning, and returns how many it deleted.
// Run calls it every PruneInterval; call it directly from a maintenance job
// if you prefer.
func (r *Relay) Prune(ctx context.Context) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		n, locked, err := r.pruneBatch(ctx)
		total += n
		if err != nil {
			return total, err
		}
		if !locked || n < int64(r.cfg.PruneBatch) {
			return total, nil
		}
	}
	return total, ctx.Err()
}

func (r *Relay) pruneBatch(ctx context.Context) (deleted int64, locked bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
	defer cancel()
	_, err = settle(ctx, r.db, r.sql, r.cfg.StatementTimeout, func(tx *sql.Tx) (int64, error) {
		if err := tx.QueryRowContext(ctx, r.sql.pruneLock).Scan(&locked); err != nil {
			return 0, fmt.Errorf("lock: %w", err)
		}
		if !locked {
			return 0, nil
		}
		res, err := tx.ExecContext(ctx, r.sql.prune, outboxsql.PruneArgs{Retention: r.cfg.Retention, Batch: r.cfg.PruneBatch}.Args()...)
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
