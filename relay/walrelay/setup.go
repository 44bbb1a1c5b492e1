package walrelay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// initialise creates the slot and publishes the rows the table held
// before it: the slot streams only transactions that commit after it
// exists. It runs under an advisory lock, one relay at a time, and marks
// the publication (its comment) until it is done: a relay that dies half
// way leaves the mark, and the next one drops the slot and starts over, so
// the earlier rows are never left behind a slot that streams. Those
// published before the death are published again: the backlog is the
// bound on duplicates of that rare crash.
func (r *Relay) initialise(ctx context.Context, pool *pgxpool.Pool, repl *pgconn.PgConn, ls *lanes) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("initialise slot: %w", err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, outboxsql.WALInitLock, r.cfg.Slot).Scan(&locked); err != nil {
		return fmt.Errorf("initialise slot: lock: %w", err)
	}
	if !locked {
		return errSlotBusy
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.StatementTimeout)
		defer cancel()
		if _, err := conn.Exec(uctx, outboxsql.WALInitUnlock, r.cfg.Slot); err != nil {
			// The lock ends with the session: drop the connection.
			_ = conn.Conn().Close(uctx)
		}
	}()
	st, err := r.slotState(ctx, conn)
	if err != nil {
		return err
	}
	mark, _, err := r.marker(ctx, conn)
	if err != nil {
		return err
	}
	if st.exists && mark == "" {
		return nil // another relay finished meanwhile
	}
	if st.exists {
		if st.active {
			return errSlotBusy
		}
		r.log.Warn("a relay died while it initialised the slot; starting over")
		if _, err := conn.Exec(ctx, outboxsql.WALDropSlot, r.cfg.Slot); err != nil {
			return fmt.Errorf("drop the half-initialised slot: %w", err)
		}
	}
	if _, err := conn.Exec(ctx, outboxsql.WALSetMarker(r.cfg.Publication, r.initMarker())); err != nil {
		return fmt.Errorf("%w: mark publication %s (the relay's role must own it): %w", errPermanent, r.cfg.Publication, err)
	}
	snapshot, err := r.createGatedSlot(ctx, conn, repl)
	if err != nil {
		return err
	}
	backlog, err := r.readBacklog(ctx, conn, snapshot)
	if err != nil {
		return err
	}
	if len(backlog) > 0 {
		r.log.Info("publishing the rows written before the slot", "rows", len(backlog))
		if err := r.publishBacklog(ctx, conn, ls, backlog); err != nil {
			return err
		}
	}
	if _, err := conn.Exec(ctx, outboxsql.WALSetMarker(r.cfg.Publication, "")); err != nil {
		return fmt.Errorf("clear the publication's mark: %w", err)
	}
	r.log.Info("created replication slot", "backlog", len(backlog))
	return nil
}

// createGatedSlot runs createSlot holding the WAL gate (see
// outboxsql.OpsWALGate) on conn: an operator's retry or replay of rows
// either commits before the slot's snapshot, which then holds the rows as
// pending and publishes them with the backlog, or finds the slot and is
// refused. Without it a retry could commit after the snapshot and before
// the slot showed, leaving its rows to neither the backlog nor the
// stream.
func (r *Relay) createGatedSlot(ctx context.Context, conn *pgxpool.Conn, repl *pgconn.PgConn) (string, error) {
	if _, err := conn.Exec(ctx, outboxsql.WALSlotGate, r.names.Table); err != nil {
		return "", fmt.Errorf("initialise slot: take the WAL gate: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.StatementTimeout)
		defer cancel()
		if _, err := conn.Exec(uctx, outboxsql.WALSlotUngate, r.names.Table); err != nil {
			// The lock ends with the session: drop the connection.
			_ = conn.Conn().Close(uctx)
		}
	}()
	return r.createSlot(ctx, repl)
}

// createSlot creates the slot on the replication connection and returns
// the name of the snapshot it exports: the database as of the slot's
// consistent point, valid until the connection runs another command.
func (r *Relay) createSlot(ctx context.Context, repl *pgconn.PgConn) (string, error) {
	// The option list form is PostgreSQL 15's; 14 knows only the keyword.
	cmd := fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL pgoutput EXPORT_SNAPSHOT", r.cfg.Slot)
	if r.cfg.Failover {
		cmd = fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER true)", r.cfg.Slot)
	}
	res, err := pglogrepl.ParseCreateReplicationSlot(repl.Exec(ctx, cmd))
	if err != nil {
		return "", fmt.Errorf("create replication slot %s: %w", r.cfg.Slot, err)
	}
	return res.SnapshotName, nil
}

// readBacklog reads the unpublished rows under the slot's snapshot.
func (r *Relay) readBacklog(ctx context.Context, conn *pgxpool.Conn, snapshot string) ([]event, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("read backlog: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(snapshot)); err != nil {
		return nil, fmt.Errorf("read backlog: set snapshot: %w", err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
		return nil, fmt.Errorf("read backlog: %w", err)
	}
	rows, err := tx.Query(ctx, r.names.Render(outboxsql.WALBacklog))
	if err != nil {
		return nil, fmt.Errorf("read backlog: %w", err)
	}
	defer rows.Close()
	var (
		out []event
		bad []*rowError
	)
	for rows.Next() {
		ev, err := scanRow(rows)
		var re *rowError
		if errors.As(err, &re) {
			bad = append(bad, re)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read backlog: %w", err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read backlog: %w", err)
	}
	rows.Close()
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("read backlog: %w", err)
	}
	for _, b := range bad {
		if err := r.markUndecodable(ctx, conn.Conn(), b); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// scanRow reads one row of outboxsql.WALColumns.
func scanRow(rows pgx.Rows) (event, error) {
	var (
		ev      event
		headers []byte
	)
	if err := rows.Scan(&ev.row, &ev.e.ID, &ev.e.Topic, &ev.e.AggregateType, &ev.e.AggregateID, &ev.e.Type,
		&ev.e.ContentType, &ev.e.Payload, &headers, &ev.e.CreatedAt); err != nil {
		return event{}, err
	}
	d := decoder{}
	if err := d.headers(&ev, headers); err != nil {
		return event{}, &rowError{row: ev.row, err: err}
	}
	return ev, nil
}

// publishBacklog publishes rows in id order (per aggregate, through the
// lanes), waits until each is settled and marks them published.
func (r *Relay) publishBacklog(ctx context.Context, conn *pgxpool.Conn, ls *lanes, backlog []event) error {
	t := &txn{events: backlog}
	ls.push(t)
	for t.pending.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ls.settled:
		case <-time.After(time.Second):
		}
	}
	ids := make([]int64, 0, r.cfg.CleanupBatch)
	for i, ev := range backlog {
		ids = append(ids, ev.row)
		if len(ids) == r.cfg.CleanupBatch || i == len(backlog)-1 {
			if _, err := conn.Exec(ctx, r.names.Render(outboxsql.WALMarkPublished), outboxsql.Int64Array(ids)); err != nil {
				return fmt.Errorf("mark the backlog published: %w", err)
			}
			ids = ids[:0]
		}
	}
	return nil
}
