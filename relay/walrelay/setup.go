package walrelay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/relay"
)

// setupDeps is what a session's setup of the slot works with.
type setupDeps struct {
	pool    *pgxpool.Pool
	repl    *pgconn.PgConn // the session's replication connection, which creates the slot
	lanes   *lanes         // publish the backlog
	slot    replicationSlot
	pub     publication
	sql     *statements
	log     *slog.Logger
	table   string          // the table's name, for messages
	settled *highestSettled // raised by the backlog marked published

	// madePublication is the Run's: it created the publication and has
	// set no slot up through it yet. The setup drops that publication
	// when it refuses to set the slot up (see slotSetup.dropMadePublication), and
	// clears it once the slot is set up.
	madePublication *bool

	// legacySlot: the slot's name is an earlier version's default,
	// adopted and never created (see Relay.leaveLegacySlot).
	legacySlot bool

	failover  bool          // Config.Failover
	timeout   time.Duration // Config.StatementTimeout
	pageSize  int           // Config.MaxInFlight: backlog rows read at once
	markBatch int           // Config.CleanupBatch: backlog rows marked published at once
}

// setupDeps is what a session's setup works with.
func (r *Relay) setupDeps(pool *pgxpool.Pool, repl *pgconn.PgConn, ls *lanes) setupDeps {
	return setupDeps{pool: pool, repl: repl, lanes: ls, slot: r.slot(), pub: r.pub(), sql: r.sql, log: r.log, table: r.names.Table,
		settled: r.settled, madePublication: &r.madePublication, legacySlot: r.legacySlot, failover: r.cfg.Failover, timeout: r.cfg.StatementTimeout,
		pageSize: r.cfg.MaxInFlight, markBatch: r.cfg.CleanupBatch}
}

// slotSetup makes the slot the relay's own (see marker): it creates the slot
// if there is none and publishes the rows the table held before it (the
// slot streams only transactions that commit after it exists), or, on a
// slot it did not make or whose publication changed since, publishes
// every unpublished row of the table, which that slot may have confirmed
// without the relay publishing it; then it writes its marker. It runs
// under an advisory lock, one relay at a time, and marks the publication
// as initialising until it is done: a relay that dies half way leaves
// that mark, and the next one publishes the rows still unpublished and
// streams from the slot as it is, so the earlier rows are never left
// behind a slot that streams and the slot's table-less events are kept.
// Each page of rows is marked published once the broker has it: what a
// relay that died published is not published again.
type slotSetup struct {
	setupDeps
	fingerprint string        // the publication's, checked by the session
	conn        *pgxpool.Conn // holds the lock
	st          slotState     // the slot as found under the lock
}

func newSetup(d setupDeps, fingerprint string) *slotSetup {
	return &slotSetup{setupDeps: d, fingerprint: fingerprint}
}

// run sets the slot up, unless another relay did meanwhile.
func (s *slotSetup) run(ctx context.Context) error {
	release, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer release()
	if done, err := s.inspect(ctx); err != nil || done {
		return err
	}
	snapshot, err := s.claim(ctx)
	if err != nil {
		return err
	}
	// The ceiling is read once the slot exists, before the rows: a slot
	// made again after it starts past it (see marker).
	ceiling, err := s.position(ctx)
	if err != nil {
		return err
	}
	n, err := s.publishBacklog(ctx, snapshot)
	if errors.Is(err, errScheduledInSnapshot) {
		return s.giveUp(ctx)
	}
	if err != nil {
		return err
	}
	return s.finish(ctx, ceiling, n)
}

// lock takes the setup's advisory lock on a connection of its own, or
// returns errSlotBusy; release gives both back.
func (s *slotSetup) lock(ctx context.Context) (release func(), err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("initialise slot: %w", err)
	}
	var locked bool
	if err := conn.QueryRow(ctx, s.sql.initLock, s.slot.name).Scan(&locked); err != nil {
		conn.Release()
		return nil, fmt.Errorf("initialise slot: lock: %w", err)
	}
	if !locked {
		conn.Release()
		return nil, errSlotBusy
	}
	s.conn = conn
	return func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		if _, err := conn.Exec(uctx, s.sql.initUnlock, s.slot.name); err != nil {
			// The lock ends with the session: drop the connection.
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}, nil
}

// inspect reads the slot under the lock: done when another relay set it
// up meanwhile, errSlotBusy when another streams from it.
func (s *slotSetup) inspect(ctx context.Context) (done bool, err error) {
	st, err := s.slot.state(ctx, s.conn)
	if err != nil {
		return false, err
	}
	if st.exists && !st.here {
		return false, s.slot.otherDatabase(st, ownSlot) // made in another database since session looked
	}
	mark, _, err := s.pub.readMarker(ctx, s.conn)
	if err != nil {
		return false, err
	}
	if s.pub.owns(mark, st, s.fingerprint) {
		return true, nil // another relay finished meanwhile
	}
	if st.exists && st.active {
		return false, errSlotBusy
	}
	s.st = st
	return false, nil
}

// claim marks the publication as initialising and creates the slot if
// there is none, under the WAL gate, after making sure no polling relay
// runs and no scheduled event waits. It returns the name of the slot's
// snapshot, "" for a slot found.
func (s *slotSetup) claim(ctx context.Context) (snapshot string, err error) {
	err = s.gated(ctx, func() error {
		// A relay that set no slot up may have dropped the publication
		// since the session found it (dropMadePublication).
		switch _, ok, err := s.pub.comment(ctx, s.conn); {
		case err != nil:
			return err
		case !ok && s.st.exists:
			return s.pub.gone()
		case !ok:
			return fmt.Errorf("initialise slot: publication %s was dropped meanwhile; trying again", s.pub.name)
		case !s.st.exists && s.legacySlot:
			// Dropped since the session found it: the next session
			// resolves the names again.
			return s.refuse(ctx, fmt.Errorf("initialise slot %s: %w; trying again under the default name", s.slot.name, errLegacySlotGone))
		}
		if err := s.checkAlone(ctx); err != nil {
			return err
		}
		if _, err := s.conn.Exec(ctx, outboxsql.WALSetMarker(s.pub.name, marker{initialising: true, slot: s.slot.name}.String())); err != nil {
			return fmt.Errorf("%w: mark publication %s (the relay's role must own it): %w", errPermanent, s.pub.name, err)
		}
		if s.st.exists {
			s.log.Warn("the slot was not made by this relay, or its publication changed, or a relay died setting it up: "+
				"publishing every unpublished row of the table before streaming from it", "confirmed", pglogrepl.LSN(s.st.confirmed))
			return nil
		}
		snapshot, err = s.createSlot(ctx)
		return err
	})
	return snapshot, err
}

// checkAlone refuses to set the slot up beside polling relays
// (ErrPollingRelays) or while scheduled events wait (ErrScheduled).
func (s *slotSetup) checkAlone(ctx context.Context) error {
	var polling int
	if err := s.conn.QueryRow(ctx, s.sql.pollingRelays, relay.StaleAfterDefault.Seconds()).Scan(&polling); err != nil {
		return fmt.Errorf("initialise slot: look for polling relays: %w", err)
	}
	if polling > 0 {
		return s.refuse(ctx, fmt.Errorf("%w: %d polling relays heartbeat on %s; stop them before the WAL relay sets its slot up, or both publish every event",
			ErrPollingRelays, polling, s.table))
	}
	// The WAL relay cannot delay an event: while scheduled rows wait, the
	// backlog it publishes first would publish them early. Once the slot
	// exists, the trigger of schema version 7 refuses new ones; a
	// scheduled row of a transaction in progress now, which the slot
	// waits for, is found in the slot's snapshot (see publishBacklog).
	var scheduled bool
	if err := s.conn.QueryRow(ctx, s.sql.scheduled).Scan(&scheduled); err != nil {
		return fmt.Errorf("initialise slot: look for scheduled events (is the outbox at schema version 7?): %w", err)
	}
	if scheduled {
		return s.refuse(ctx, fmt.Errorf("%w: %s holds unpublished events with a NotBefore still to come, which the WAL relay would publish at once; "+
			"wait until the polling relay has published them", ErrScheduled, s.table))
	}
	return nil
}

// refuse returns err, why the relay sets no slot up, after dropping the
// publication this Run created; not when a slot was found, which decodes
// through it.
func (s *slotSetup) refuse(ctx context.Context, err error) error {
	if s.st.exists {
		return err
	}
	return errors.Join(err, s.dropMadePublication(ctx))
}

// position reads the server's WAL insert position.
func (s *slotSetup) position(ctx context.Context) (uint64, error) {
	var now string
	if err := s.conn.QueryRow(ctx, s.sql.position).Scan(&now); err != nil {
		return 0, fmt.Errorf("initialise slot: %w", err)
	}
	lsn, err := pglogrepl.ParseLSN(now)
	return uint64(lsn), err
}

// giveUp drops the slot just made, whose snapshot holds scheduled rows,
// before anything was published: the polling relay (which a WAL relay's
// slot stops) publishes them.
func (s *slotSetup) giveUp(ctx context.Context) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	_, derr := s.conn.Exec(uctx, s.sql.dropSlot, s.slot.name)
	_, merr := s.conn.Exec(uctx, outboxsql.WALSetMarker(s.pub.name, ""))
	var perr error
	if derr == nil {
		perr = s.gated(uctx, func() error { return s.dropMadePublication(uctx) })
	}
	return errors.Join(fmt.Errorf("%w: a transaction committed while the slot was made wrote events with a NotBefore still to come to %s; "+
		"the slot was dropped: wait until the polling relay has published them", ErrScheduled, s.table), derr, merr, perr)
}

// finish writes the relay's marker of the slot, with ceiling, once n
// rows of the backlog are published.
func (s *slotSetup) finish(ctx context.Context, ceiling uint64, n int) error {
	// The stream of a slot made here holds no row published from the
	// table (the backlog was read under its snapshot); that of a slot found
	// may hold any row the table has now (see marker).
	var settled int64
	if s.st.exists {
		if err := s.conn.QueryRow(ctx, s.sql.highestRow).Scan(&settled); err != nil {
			return fmt.Errorf("initialise slot: %w", err)
		}
	}
	m := marker{slot: s.slot.name, ceiling: ceiling, fingerprint: s.fingerprint, settled: settled}
	if _, err := s.conn.Exec(ctx, outboxsql.WALSetMarker(s.pub.name, m.String())); err != nil {
		return fmt.Errorf("mark the publication: %w", err)
	}
	*s.madePublication = false // the slot's now
	s.log.Info("slot set up", "created", !s.st.exists, "backlog", n)
	return nil
}

// gated runs fn holding the WAL gate (see outboxsql.OpsWALGate)
// exclusively on the setup's connection. An operator's retry or replay of
// rows either commits before the slot's snapshot, which then holds the
// rows as pending and publishes them with the backlog, or finds the slot
// and is refused; without it a retry could commit after the snapshot and
// before the slot showed, leaving its rows to neither the backlog nor the
// stream. A polling relay looks for the slot holding the gate shared
// after its heartbeat, so either the check for polling relays in fn sees
// its heartbeat or it sees the slot (relay.ErrWALStreams).
func (s *slotSetup) gated(ctx context.Context, fn func() error) error {
	if _, err := s.conn.Exec(ctx, s.sql.slotGate, s.sql.table); err != nil {
		return fmt.Errorf("initialise slot: take the WAL gate: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		if _, err := s.conn.Exec(uctx, s.sql.slotUngate, s.sql.table); err != nil {
			// The lock ends with the session: drop the connection.
			_ = s.conn.Conn().Close(uctx)
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
func (s *slotSetup) dropMadePublication(ctx context.Context) error {
	if !*s.madePublication {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	m, ok, err := s.pub.readMarker(ctx, s.conn)
	if err != nil || !ok || m.slot != "" && m.slot != s.slot.name {
		return err
	}
	if _, err := s.conn.Exec(ctx, outboxsql.WALDropPublication(s.pub.name)); err != nil {
		return fmt.Errorf("drop publication %s, which this relay created: %w", s.pub.name, err)
	}
	*s.madePublication = false
	s.log.Info("dropped the publication this relay created, as it sets no slot up", "publication", s.pub.name)
	return nil
}

// errLegacySlotGone: the slot of an earlier version's name the relay
// kept was dropped, and a relay never creates one (see
// Relay.leaveLegacySlot).
var errLegacySlotGone = errors.New("the slot of an earlier version's default name is gone")

// errScheduledInSnapshot: the backlog of a slot just made holds scheduled
// rows (see publishBacklog).
var errScheduledInSnapshot = errors.New("scheduled rows in the slot's snapshot")

// createSlot creates the slot on the replication connection and returns
// the name of the snapshot it exports: the database as of the slot's
// consistent point, valid until the connection runs another command.
func (s *slotSetup) createSlot(ctx context.Context) (string, error) {
	// The option list form is PostgreSQL 15's; 14 knows only the keyword.
	cmd := fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL pgoutput EXPORT_SNAPSHOT", s.slot.name)
	if s.failover {
		cmd = fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER true)", s.slot.name)
	}
	res, err := pglogrepl.ParseCreateReplicationSlot(s.repl.Exec(ctx, cmd))
	if err != nil {
		return "", fmt.Errorf("create replication slot %s: %w", s.slot.name, err)
	}
	return res.SnapshotName, nil
}

// publishBacklog publishes the table's unpublished rows, under snapshot
// unless it is "", a page of MaxInFlight rows at a time in id order (per
// aggregate, through the lanes), and marks each page published once it is
// settled. It returns how many rows it published.
func (s *slotSetup) publishBacklog(ctx context.Context, snapshot string) (int, error) {
	q, done, err := s.backlogSource(ctx, snapshot)
	if err != nil {
		return 0, err
	}
	defer done()
	var (
		after int64
		total int
		page  []event
	)
	for {
		if page, err = s.backlogPage(ctx, q, after, page); err != nil {
			return total, err
		}
		if len(page) == 0 {
			return total, nil
		}
		after = page[len(page)-1].row
		if err := s.settle(ctx, &txn{events: page}); err != nil {
			return total, err
		}
		if err := s.markPublished(ctx, page); err != nil {
			return total, err
		}
		total += len(page)
		page = nil // the lanes may still hold pointers into this one
	}
}

// backlogSource returns what the backlog is read through: the setup's
// connection, or with a snapshot a read-only transaction under it, in
// which a scheduled row makes it errScheduledInSnapshot. done ends it.
func (s *slotSetup) backlogSource(ctx context.Context, snapshot string) (q pgxRows, done func(), err error) {
	if snapshot == "" {
		return s.conn, func() {}, nil
	}
	tx, err := s.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, nil, fmt.Errorf("read backlog: %w", err)
	}
	done = func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(snapshot)); err != nil {
		done()
		return nil, nil, fmt.Errorf("read backlog: set snapshot: %w", err)
	}
	// A scheduled row the check before the slot could not see (its
	// transaction was in progress; the slot waited for it) is in the
	// snapshot: publishing the backlog would publish it early.
	var scheduled bool
	if err := tx.QueryRow(ctx, s.sql.scheduled).Scan(&scheduled); err != nil {
		done()
		return nil, nil, fmt.Errorf("read backlog: look for scheduled events: %w", err)
	}
	if scheduled {
		done()
		return nil, nil, errScheduledInSnapshot
	}
	return tx, done, nil
}

// settle hands t to the lanes and waits until its events are settled.
func (s *slotSetup) settle(ctx context.Context, t *txn) error {
	s.lanes.push(t)
	for t.pending.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.lanes.settled:
		case <-time.After(time.Second):
		}
	}
	return nil
}

// markPublished marks the rows of page published but the undecodable
// ones (marked dead by the lanes), markBatch at a time.
func (s *slotSetup) markPublished(ctx context.Context, page []event) error {
	ids := make([]int64, 0, len(page))
	for _, ev := range page {
		if ev.bad == nil {
			ids = append(ids, ev.row)
		}
	}
	for len(ids) > 0 {
		n := min(len(ids), s.markBatch)
		if _, err := s.pool.Exec(ctx, s.sql.markPublished, outboxsql.Int64Array(ids[:n])); err != nil {
			return fmt.Errorf("mark the backlog published: %w", err)
		}
		s.settled.note(ids[n-1])
		ids = ids[n:]
	}
	return nil
}

// backlogPage reads the page of rows after id after.
func (s *slotSetup) backlogPage(ctx context.Context, q pgxRows, after int64, out []event) ([]event, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rows, err := q.Query(ctx, s.sql.backlog, outboxsql.BacklogArgs{After: after, Limit: s.pageSize}.Args()...)
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
