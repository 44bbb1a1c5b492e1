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
	"github.com/txoutbox/txoutbox/relay"
)

// initialise makes the slot the relay's own (see marker): it creates the
// slot if there is none and publishes the rows the table held before it
// (the slot streams only transactions that commit after it exists), or,
// on a slot it did not make or whose publication changed since, publishes
// every unpublished row of the table, which that slot may have confirmed
// without the relay publishing it; then it writes its marker. It runs
// under an advisory lock, one relay at a time, and marks the publication
// as initialising until it is done: a relay that dies half way leaves
// that mark, and the next one publishes the rows still unpublished and
// streams from the slot as it is, so the earlier rows are never left
// behind a slot that streams and the slot's table-less events are kept.
// Each page of rows is marked published once the broker has it: what a
// relay that died published is not published again.
func (r *Relay) initialise(ctx context.Context, pool *pgxpool.Pool, repl *pgconn.PgConn, ls *lanes, fingerprint string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("initialise slot: %w", err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, r.sql.initLock, r.cfg.Slot).Scan(&locked); err != nil {
		return fmt.Errorf("initialise slot: lock: %w", err)
	}
	if !locked {
		return errSlotBusy
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.StatementTimeout)
		defer cancel()
		if _, err := conn.Exec(uctx, r.sql.initUnlock, r.cfg.Slot); err != nil {
			// The lock ends with the session: drop the connection.
			_ = conn.Conn().Close(uctx)
		}
	}()
	st, err := r.slotState(ctx, conn)
	if err != nil {
		return err
	}
	if st.exists && !st.here {
		return r.otherDatabase(st, ownSlot) // made in another database since session looked
	}
	mark, _, err := r.pub().readMarker(ctx, conn)
	if err != nil {
		return err
	}
	if r.pub().owns(mark, st, fingerprint) {
		return nil // another relay finished meanwhile
	}
	if st.exists && st.active {
		return errSlotBusy
	}
	// refuse returns err, why the relay sets no slot up, after dropping
	// the publication this Run created; not when a slot was found, which
	// decodes through it.
	refuse := func(err error) error {
		if st.exists {
			return err
		}
		return errors.Join(err, r.dropMadePublication(ctx, conn))
	}
	snapshot := ""
	if err := r.gated(ctx, conn, func() error {
		// A relay that set no slot up may have dropped the publication
		// since the session found it (dropMadePublication).
		switch _, ok, err := r.pub().comment(ctx, conn); {
		case err != nil:
			return err
		case !ok && st.exists:
			return r.pub().gone()
		case !ok:
			return fmt.Errorf("initialise slot: publication %s was dropped meanwhile; trying again", r.cfg.Publication)
		}
		var polling int
		if err := conn.QueryRow(ctx, r.sql.pollingRelays, relay.StaleAfterDefault.Seconds()).Scan(&polling); err != nil {
			return fmt.Errorf("initialise slot: look for polling relays: %w", err)
		}
		if polling > 0 {
			return refuse(fmt.Errorf("%w: %d polling relays heartbeat on %s; stop them before the WAL relay sets its slot up, or both publish every event",
				ErrPollingRelays, polling, r.names.Table))
		}
		// The WAL relay cannot delay an event: while scheduled rows wait,
		// the backlog it publishes first would publish them early. Once the
		// slot exists, the trigger of schema version 7 refuses new ones; a
		// scheduled row of a transaction in progress now, which the slot
		// waits for, is found in the slot's snapshot (see publishBacklog).
		var scheduled bool
		if err := conn.QueryRow(ctx, r.sql.scheduled).Scan(&scheduled); err != nil {
			return fmt.Errorf("initialise slot: look for scheduled events (is the outbox at schema version 7?): %w", err)
		}
		if scheduled {
			return refuse(fmt.Errorf("%w: %s holds unpublished events with a NotBefore still to come, which the WAL relay would publish at once; "+
				"wait until the polling relay has published them", ErrScheduled, r.names.Table))
		}
		if _, err := conn.Exec(ctx, outboxsql.WALSetMarker(r.cfg.Publication, marker{initialising: true, slot: r.cfg.Slot}.String())); err != nil {
			return fmt.Errorf("%w: mark publication %s (the relay's role must own it): %w", errPermanent, r.cfg.Publication, err)
		}
		if st.exists {
			r.log.Warn("the slot was not made by this relay, or its publication changed, or a relay died setting it up: "+
				"publishing every unpublished row of the table before streaming from it", "confirmed", pglogrepl.LSN(st.confirmed))
			return nil
		}
		snapshot, err = r.createSlot(ctx, repl)
		return err
	}); err != nil {
		return err
	}
	// The ceiling is read once the slot exists, before the rows: a slot
	// made again after it starts past it (see marker).
	var now string
	if err := conn.QueryRow(ctx, r.sql.position).Scan(&now); err != nil {
		return fmt.Errorf("initialise slot: %w", err)
	}
	ceiling, err := pglogrepl.ParseLSN(now)
	if err != nil {
		return err
	}
	n, err := r.publishBacklog(ctx, conn, pool, ls, snapshot)
	if errors.Is(err, errScheduledInSnapshot) {
		// Nothing was published: give the slot up, so the polling relay
		// (which a WAL relay's slot stops) publishes the scheduled rows.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.StatementTimeout)
		defer cancel()
		_, derr := conn.Exec(uctx, r.sql.dropSlot, r.cfg.Slot)
		_, merr := conn.Exec(uctx, outboxsql.WALSetMarker(r.cfg.Publication, ""))
		var perr error
		if derr == nil {
			perr = r.gated(uctx, conn, func() error { return r.dropMadePublication(uctx, conn) })
		}
		return errors.Join(fmt.Errorf("%w: a transaction committed while the slot was made wrote events with a NotBefore still to come to %s; "+
			"the slot was dropped: wait until the polling relay has published them", ErrScheduled, r.names.Table), derr, merr, perr)
	}
	if err != nil {
		return err
	}
	// The stream of a slot made here holds no row published from the
	// table (the backlog was read under its snapshot); that of a slot found
	// may hold any row the table has now (see marker).
	var settled int64
	if st.exists {
		if err := conn.QueryRow(ctx, r.sql.highestRow).Scan(&settled); err != nil {
			return fmt.Errorf("initialise slot: %w", err)
		}
	}
	m := marker{slot: r.cfg.Slot, ceiling: uint64(ceiling), fingerprint: fingerprint, settled: settled}
	if _, err := conn.Exec(ctx, outboxsql.WALSetMarker(r.cfg.Publication, m.String())); err != nil {
		return fmt.Errorf("mark the publication: %w", err)
	}
	r.madePublication = false // the slot's now
	r.log.Info("slot set up", "created", !st.exists, "backlog", n)
	return nil
}

// gated runs fn holding the WAL gate (see outboxsql.OpsWALGate)
// exclusively on conn. An operator's retry or replay of rows either
// commits before the slot's snapshot, which then holds the rows as pending
// and publishes them with the backlog, or finds the slot and is refused;
// without it a retry could commit after the snapshot and before the slot
// showed, leaving its rows to neither the backlog nor the stream. A
// polling relay looks for the slot holding the gate shared after its
// heartbeat, so either the check for polling relays in fn sees its
// heartbeat or it sees the slot (relay.ErrWALStreams).
func (r *Relay) gated(ctx context.Context, conn *pgxpool.Conn, fn func() error) error {
	if _, err := conn.Exec(ctx, r.sql.slotGate, r.sql.table); err != nil {
		return fmt.Errorf("initialise slot: take the WAL gate: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.StatementTimeout)
		defer cancel()
		if _, err := conn.Exec(uctx, r.sql.slotUngate, r.sql.table); err != nil {
			// The lock ends with the session: drop the connection.
			_ = conn.Conn().Close(uctx)
		}
	}()
	return fn()
}

// dropMadePublication drops the publication if this Run created it
// (ensurePublication), when the relay sets no slot up after all: a relay
// that refuses to start leaves nothing behind. The caller holds the WAL
// gate and has no slot of the publication. Relays mark the publication
// under the gate before they make a slot through it, so one marked for
// another slot is left alone.
func (r *Relay) dropMadePublication(ctx context.Context, conn *pgxpool.Conn) error {
	if !r.madePublication {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.StatementTimeout)
	defer cancel()
	m, ok, err := r.pub().readMarker(ctx, conn)
	if err != nil || !ok || m.slot != "" && m.slot != r.cfg.Slot {
		return err
	}
	if _, err := conn.Exec(ctx, outboxsql.WALDropPublication(r.cfg.Publication)); err != nil {
		return fmt.Errorf("drop publication %s, which this relay created: %w", r.cfg.Publication, err)
	}
	r.madePublication = false
	r.log.Info("dropped the publication this relay created, as it sets no slot up", "publication", r.cfg.Publication)
	return nil
}

// errScheduledInSnapshot: the backlog of a slot just made holds scheduled
// rows (see publishBacklog).
var errScheduledInSnapshot = errors.New("scheduled rows in the slot's snapshot")

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

// publishBacklog publishes the table's unpublished rows, under snapshot
// unless it is "", a page of MaxInFlight rows at a time in id order (per
// aggregate, through the lanes), and marks each page published once it is
// settled. It returns how many rows it published.
func (r *Relay) publishBacklog(ctx context.Context, conn *pgxpool.Conn, pool *pgxpool.Pool, ls *lanes, snapshot string) (int, error) {
	var q pgxRows = conn
	if snapshot != "" {
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return 0, fmt.Errorf("read backlog: %w", err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(snapshot)); err != nil {
			return 0, fmt.Errorf("read backlog: set snapshot: %w", err)
		}
		// A scheduled row the check before the slot could not see (its
		// transaction was in progress; the slot waited for it) is in the
		// snapshot: publishing the backlog would publish it early.
		var scheduled bool
		if err := tx.QueryRow(ctx, r.sql.scheduled).Scan(&scheduled); err != nil {
			return 0, fmt.Errorf("read backlog: look for scheduled events: %w", err)
		}
		if scheduled {
			return 0, errScheduledInSnapshot
		}
		q = tx
	}
	stmt := r.sql.backlog
	var (
		after int64
		total int
		page  []event
	)
	for {
		var err error
		if page, err = r.backlogPage(ctx, q, stmt, after, page); err != nil {
			return total, err
		}
		if len(page) == 0 {
			return total, nil
		}
		after = page[len(page)-1].row
		t := &txn{events: page}
		ls.push(t)
		for t.pending.Load() > 0 {
			select {
			case <-ctx.Done():
				return total, ctx.Err()
			case <-ls.settled:
			case <-time.After(time.Second):
			}
		}
		ids := make([]int64, 0, len(page))
		for _, ev := range page {
			if ev.bad == nil {
				ids = append(ids, ev.row)
			}
		}
		for len(ids) > 0 {
			n := min(len(ids), r.cfg.CleanupBatch)
			if _, err := pool.Exec(ctx, r.sql.markPublished, outboxsql.Int64Array(ids[:n])); err != nil {
				return total, fmt.Errorf("mark the backlog published: %w", err)
			}
			r.settled.note(ids[n-1])
			ids = ids[n:]
		}
		total += len(page)
		page = nil // the lanes may still hold pointers into this one
	}
}

// backlogPage reads the page of rows after id after.
func (r *Relay) backlogPage(ctx context.Context, q pgxRows, stmt string, after int64, out []event) ([]event, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
	defer cancel()
	rows, err := q.Query(ctx, stmt, outboxsql.BacklogArgs{After: after, Limit: r.cfg.MaxInFlight}.Args()...)
	if err != nil {
		return nil, fmt.Errorf("read backlog: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		ev, err := scanRow(rows)
		var re *rowError
		if errors.As(err, &re) {
			ev = event{row: re.row, bad: re}
		} else if err != nil {
			return nil, fmt.Errorf("read backlog: %w", err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read backlog: %w", err)
	}
	return out, nil
}

// pgxRows is a pgx connection or transaction.
type pgxRows interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
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
