package relay

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/partitions"
	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// pruner deletes published rows older than Retention, a batch per
// statement so no delete holds many locks or a long transaction. An advisory
// lock lets one relay prune at a time; the others skip the round.
type pruner struct {
	db      *sql.DB
	tx      *tableTx
	sql     *statements
	cfg     Config // Retention, PruneInterval, PruneBatch, StatementTimeout, LockTimeout
	log     *slog.Logger
	lockout *lockout // no prune runs while the table is locked out

	table partitions.Table // names its partitions
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
	if !st.Partitioned || !st.Owner {
		// A role that may not drop partitions may not delete from them
		// directly either: it prunes through the parent, row by row.
		return p.deleteAll(ctx, p.sql.prune)
	}
	kept, err := p.partitions(ctx, st)
	if err != nil {
		return 0, fmt.Errorf("prune: %w", err)
	}
	var total int64
	for _, leaf := range kept {
		n, err := p.deleteAll(ctx, p.sql.names.ForPartition(leaf).Render(outboxsql.Prune))
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// state reads partitions.ReadState's statement under the relay's lock
// timeout: it reads the table.
func (p *pruner) state(ctx context.Context) (partitions.State, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StatementTimeout)
	defer cancel()
	var st partitions.State
	if err := p.tx.query(ctx, scanRow(&st.Partitioned, &st.Owner, &st.MaxID, &st.Floor), p.sql.names.Render(outboxsql.PartitionState)); err != nil {
		return partitions.State{}, fmt.Errorf("read partition state: %w", err)
	}
	return st, nil
}

// partitions creates the partitions ahead and drops those past retention,
// unless another relay is at it (the prune lock, held by a session
// meanwhile), and returns the partitions to prune row by row: those kept
// by dead rows, and the default one. A partition whose drop failed is
// left whole to the next round.
func (p *pruner) partitions(ctx context.Context, st partitions.State) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.PruneInterval+p.cfg.StatementTimeout)
	defer cancel()
	leaves, err := partitions.List(ctx, p.db, p.sql.names)
	if err != nil {
		return nil, err
	}
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var locked bool
	if err := conn.QueryRowContext(ctx, p.sql.pruneSessionLock).Scan(&locked); err != nil || !locked {
		return nil, err // another relay maintains them; this one prunes nothing this round
	}
	defer func() {
		// A fresh context: the lock must go back with the session to the pool.
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.StatementTimeout)
		defer ucancel()
		// Not unlocked (false) if the table's OID, the lock's key, changed
		// meanwhile (the outbox was converted to a partitioned one).
		var unlocked bool
		if err := conn.QueryRowContext(uctx, p.sql.pruneSessionUnlock).Scan(&unlocked); err != nil || !unlocked {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // drop the session, and its lock
		}
	}()
	to := partitions.Timeouts{Lock: partitions.LockTimeout, Statement: p.cfg.StatementTimeout}
	if st.MaxID >= partitions.Top(leaves) {
		p.log.Warn("relay: writers outran the partitions ahead; their rows went to the default partition",
			"max_id", st.MaxID, "partitions_end", partitions.Top(leaves))
	}
	created, err := partitions.CreateAhead(ctx, conn, p.table, leaves, st.MaxID, to)
	if len(created) > 0 {
		p.log.Info("relay: created outbox partitions", "partitions", created)
	}
	if err != nil {
		p.log.Warn("relay: partitions not created ahead; the next round tries again", "err", err)
	}
	dropped, kept, err := partitions.Sweep(ctx, conn, p.sql.names, leaves, st.Floor, p.cfg.Retention, to)
	if len(dropped) > 0 {
		p.log.Info("relay: dropped outbox partitions past retention", "partitions", dropped)
	}
	if err != nil {
		p.log.Warn("relay: partition not dropped; the next round tries again", "err", err)
	}
	return kept, nil
}

// deleteAll deletes published rows past retention with the prune statement
// q, a batch per transaction, until a batch comes short.
func (p *pruner) deleteAll(ctx context.Context, q string) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		n, locked, err := p.batch(ctx, q)
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
func (p *pruner) batch(ctx context.Context, q string) (deleted int64, locked bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StatementTimeout)
	defer cancel()
	_, err = settle(ctx, p.db, p.sql, p.cfg.StatementTimeout, p.cfg.LockTimeout, func(tx *sql.Tx) (int64, error) {
		if err := tx.QueryRowContext(ctx, p.sql.pruneLock).Scan(&locked); err != nil {
			return 0, fmt.Errorf("lock: %w", err)
		}
		if !locked {
			return 0, nil
		}
		res, err := tx.ExecContext(ctx, q, outboxsql.PruneArgs{Retention: p.cfg.Retention, Batch: p.cfg.PruneBatch}.Args()...)
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
