package walrelay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// slotState is a row of pg_replication_slots.
type slotState struct {
	exists    bool
	active    bool
	walStatus string
	confirmed uint64
	plugin    string
	database  string
	lagBytes  int64
	here      bool // database is the current database
}

// pgxExecer is a pgx pool, connection or transaction.
type pgxExecer interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}

// pgxQuerier is a pgx pool, connection or transaction.
type pgxQuerier interface {
	QueryRow(context.Context, string, ...any) pgx.Row
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

func (r *Relay) slotState(ctx context.Context, q pgxQuerier) (slotState, error) {
	var (
		s   slotState
		lsn string
	)
	err := q.QueryRow(ctx, r.sql.slot, r.cfg.Slot).Scan(&s.active, &s.walStatus, &lsn, &s.plugin, &s.database, &s.lagBytes, &s.here)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("read slot %s: %w", r.cfg.Slot, err)
	}
	s.exists = true
	l, err := pglogrepl.ParseLSN(lsn)
	if err != nil {
		return s, fmt.Errorf("slot %s: confirmed_flush_lsn %q: %w", r.cfg.Slot, lsn, err)
	}
	s.confirmed = uint64(l)
	return s, nil
}

// usable rejects a slot the relay cannot stream from.
func (r *Relay) usable(s slotState) error {
	if !s.here {
		return r.otherDatabase(s, ownSlot)
	}
	if s.walStatus == "lost" {
		return fmt.Errorf("%w: slot %s has wal_status lost: PostgreSQL removed WAL it still needed (max_slot_wal_keep_size), "+
			"so committed events may be missing from the stream; switch to the polling relay with `outbox wal takeover`, which republishes every row the slot did not confirm", ErrSlotLost, r.cfg.Slot)
	}
	if s.plugin != "pgoutput" {
		return fmt.Errorf("%w: slot %s decodes with %q, not pgoutput", errPermanent, r.cfg.Slot, s.plugin)
	}
	return nil
}

// otherDatabase is the error of slot s, of another database than the
// relay's, ending with what to do.
func (r *Relay) otherDatabase(s slotState, todo string) error {
	return fmt.Errorf("%w: slot %s is database %s's, not %s's (a slot's name is the server's, the slot one database's): %s",
		ErrSlotOtherDatabase, r.cfg.Slot, s.database, r.database, todo)
}

// ownSlot says what to do about a slot of another database.
const ownSlot = "give this relay a slot of its own: leave the slot's name to its default (unique per database) or name another"

// comment returns the publication's comment, the relay's marker ("" when
// none), and whether the publication exists.
func (p publication) comment(ctx context.Context, q pgxQuerier) (string, bool, error) {
	var m string
	err := q.QueryRow(ctx, p.sql.publication, p.name).Scan(&m)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read publication %s: %w", p.name, err)
	}
	return m, true, nil
}

// ensurePublication creates the publication if it does not exist, on
// PostgreSQL 15 and later with a column list (see
// outboxsql.WALCreatePublication). One that exists is left as it is: the
// decoder finds its columns by name in whatever the stream sends. One it
// creates is the Run's to drop if the Run sets no slot up (see
// dropMadePublication).
func (r *Relay) ensurePublication(ctx context.Context, pool *pgxpool.Pool, srv serverFacts) error {
	if _, ok, err := r.pub().comment(ctx, pool); err != nil || ok {
		return err
	}
	_, err := pool.Exec(ctx, outboxsql.WALCreatePublication(r.names, r.cfg.Publication, srv.VersionNum >= columnListVersion))
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		r.madePublication = true
		r.log.Info("created publication", "publication", r.cfg.Publication, "table", r.names.Table)
		return nil
	case errors.As(err, &pgErr) && pgErr.Code == "42710": // duplicate_object: another relay created it
		return nil
	case errors.As(err, &pgErr) && (pgErr.Code == "42501" || pgErr.Code == "42P01"):
		return fmt.Errorf("%w: create publication %s: %w", errPermanent, r.cfg.Publication, err)
	}
	return fmt.Errorf("create publication %s: %w", r.cfg.Publication, err)
}

// session runs one attempt: check the publication, take the slot over
// if the relay does not own it (see marker), stream.
func (r *Relay) session(ctx context.Context, pool *pgxpool.Pool, srv serverFacts) error {
	st, err := r.slotState(ctx, pool)
	if err != nil {
		return err
	}
	if st.exists {
		if err := r.usable(st); err != nil {
			return err
		}
		if st.active {
			// Another relay streams: rows it settles are not in this
			// relay's highest settled row, which it reads afresh from the
			// marker when it takes the slot over (after a crash of
			// PostgreSQL the stream would bring them again).
			r.settled.forget()
			return errSlotBusy
		}
		if _, ok, err := r.pub().comment(ctx, pool); err != nil {
			return err
		} else if !ok {
			return r.pub().gone()
		}
	}
	if err := r.ensurePublication(ctx, pool, srv); err != nil {
		return err
	}
	fp, err := r.pub().check(ctx, pool, srv)
	if err != nil {
		if errors.Is(err, ErrPublication) {
			r.pub().disown(ctx, pool)
		}
		return err
	}
	mark, _, err := r.pub().readMarker(ctx, pool)
	if err != nil {
		return err
	}
	prefix, err := r.messagePrefix(ctx, pool)
	if err != nil {
		return err
	}
	rc, err := r.replicationConfig()
	if err != nil {
		return err
	}
	repl, err := pgconn.ConnectConfig(ctx, rc)
	if err != nil {
		return fmt.Errorf("open replication connection: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = repl.Close(cctx)
	}()
	// Deferred after the close, so it runs first: the lanes end their
	// publishes while the relay still holds the slot, and no standby
	// streams the same events meanwhile.
	ls := newLanes(context.WithoutCancel(ctx), r.cfg.Lanes, r.laneDeps(pool))
	defer ls.stop()
	if !r.pub().owns(mark, st, fp) {
		if err := r.initialise(ctx, pool, repl, ls, fp); err != nil {
			return err
		}
	}
	// After the setup, whose rows it marked published the stream skips,
	// and before the stream starts: the server waits for no answer yet.
	rs, err := r.resumeFrom(ctx, pool)
	if err != nil {
		return err
	}
	err = pglogrepl.StartReplication(ctx, repl, r.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		// Binary column values: the walsender sends bytea, uuid, jsonb and
		// timestamptz as they are stored instead of formatting them.
		PluginArgs: []string{"proto_version '1'", "publication_names " + quoteLiteral(r.cfg.Publication),
			"messages 'true'", "binary 'true'"},
	})
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "55006": // object_in_use: "replication slot ... is active for PID ..."
		return errSlotBusy
	case err != nil:
		return fmt.Errorf("start replication from slot %s: %w", r.cfg.Slot, err)
	}
	// Holding the slot now, make sure no relay is initialising it and the
	// slot is still the one the relay owns: one that created it publishes
	// the table's earlier rows before anything streamed, or they would go
	// out after later events.
	if mark, _, err = r.pub().readMarker(ctx, pool); err != nil {
		return err
	}
	if st, err = r.slotState(ctx, pool); err != nil {
		return err
	}
	if !st.exists {
		return fmt.Errorf("slot %s is gone", r.cfg.Slot)
	}
	if err := r.usable(st); err != nil {
		return err
	}
	if !r.pub().owns(mark, st, fp) {
		return errSlotBusy
	}
	r.fingerprint = fp
	r.ceiling.Store(mark.ceiling)
	r.met.sample(st)
	r.active.Store(true)
	defer r.active.Store(false)
	r.log.Info("streaming", "publication", r.cfg.Publication, "from", pglogrepl.LSN(st.confirmed))
	return r.stream(ctx, pool, srv, repl, ls, st.confirmed, rs, prefix)
}

// gone is the error of a slot whose publication was dropped.
func (p publication) gone() error {
	return fmt.Errorf("%w: publication %s was dropped while slot %s exists: PostgreSQL decodes the slot's WAL with the publication as it was "+
		"at each change, so the slot cannot stream any more. Run `outbox wal takeover --force` (it drops the slot; every unpublished row stays in "+
		"the table, table-less events the slot had not confirmed are lost), then start the relay again: it creates the publication and a new slot "+
		"and publishes the table's unpublished rows first", ErrPublication, p.name, p.slot)
}

// resume bounds what a session looks up of the rows it streams. The
// slot's position on disk lags the one last confirmed until a checkpoint,
// so after a crash of PostgreSQL (or a backend's, which reinitialises the
// server in place) it moves back, and the transactions in between come
// again: their rows the table holds as published or dead are skipped (see
// skipSettled). Only a transaction that ended before the session started
// can be one of them, and only a row whose id is at most the highest of a
// settled row when it started can be settled: rows settle by this relay's
// own cleanup and dead marks, which reach a row only after the session
// streamed it. A relay restarted on a backlog no table row of which has
// settled looks nothing up; before this bound it ran a query per
// transaction of the backlog, about a quarter of the PostgreSQL CPU of
// draining it.
type resume struct {
	until      uint64 // the WAL position when the session started
	settledMax int64  // the highest id of a published or dead row then
}

// resumeFrom reads the session's resume bounds. The highest settled row
// is read when the relay starts streaming and after another relay
// streamed, and kept up since (see highestSettled.note), so a relay that
// reconnects to a slot no one else streamed meanwhile reads nothing. It is
// the marker's settled row (see marker) or the highest dead row, whichever
// is higher: two index look-ups, whatever the backlog. Only a marker
// without one makes it walk the table (WALSettledMax), once: the row read
// is written to the marker with the next ceiling. A row the cleanup marked
// published within a ceilingInterval before a crash of PostgreSQL may be
// published again. When the row cannot be read in time, every recovered
// transaction is looked up, as before the bound existed.
func (r *Relay) resumeFrom(ctx context.Context, pool *pgxpool.Pool) (resume, error) {
	var now string
	if err := pool.QueryRow(ctx, r.sql.position).Scan(&now); err != nil {
		return resume{}, fmt.Errorf("read the WAL position: %w", err)
	}
	end, err := pglogrepl.ParseLSN(now)
	if err != nil {
		return resume{}, err
	}
	rs := resume{until: uint64(end), settledMax: math.MaxInt64}
	if h := r.settled.load(); h >= 0 {
		rs.settledMax = h // read by an earlier session, raised since
		return rs, nil
	}
	mark, _, err := r.pub().readMarker(ctx, pool)
	if err != nil {
		return resume{}, err
	}
	var m int64
	if mark.slot == r.cfg.Slot && !mark.initialising && mark.settled >= 0 {
		err = r.settledQuery(ctx, pool, r.sql.deadMax, &m)
		m = max(m, mark.settled)
	} else {
		err = r.settledQuery(ctx, pool, r.sql.settledMax, &m)
	}
	switch {
	case err == nil:
		rs.settledMax = m
		r.settled.set(m)
	case ctx.Err() != nil:
		return resume{}, ctx.Err()
	default:
		r.log.Warn("could not read the highest settled row; looking up every transaction the slot sends again", "err", err)
	}
	return rs, nil
}

// settledQuery runs stmt, settledMax or deadMax, into m.
func (r *Relay) settledQuery(ctx context.Context, pool *pgxpool.Pool, stmt string, m *int64) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
	defer cancel()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only; nothing to keep
	if _, err := tx.Exec(ctx, r.sql.settledMaxSettings); err != nil {
		return err
	}
	return tx.QueryRow(ctx, stmt).Scan(m)
}

// mayBeSettled reports whether row, of a transaction ending at end, may be
// one the table already holds as published or dead.
func (rs resume) mayBeSettled(end uint64, row int64) bool {
	return end <= rs.until && row != 0 && row <= rs.settledMax
}

// inMsg is one message of the replication stream.
type inMsg struct {
	keepalive bool
	walEnd    uint64 // keepalive: what the server has sent up to
	reply     bool   // keepalive: the server asks for a status update now
	msg       pglogrepl.Message
}

// stream reads the slot until ctx ends or the connection fails.
//
// The confirmed position, reported to the server as written, flushed and
// applied, only ever moves to the end of a transaction whose events, and
// every earlier transaction's, are settled (published or dead): a prefix in
// commit order. With nothing in flight and no transaction half read, it
// moves to the end of WAL the server says it has sent (a keepalive), so an
// idle outbox does not hold WAL back; never while anything is in flight.
func (r *Relay) stream(ctx context.Context, pool *pgxpool.Pool, srv serverFacts, repl *pgconn.PgConn, ls *lanes, confirmed uint64, rs resume, prefix string) error {
	rctx, stopReader := context.WithCancel(context.WithoutCancel(ctx))
	var (
		msgs    = make(chan inMsg, 256)
		readErr = make(chan error, 1)
		heard   atomic.Int64 // unix nanoseconds the reader last received, or was waiting on us
		blocked atomic.Bool  // the reader waits for the loop, not for the server
		wg      sync.WaitGroup
	)
	heard.Store(time.Now().UnixNano())
	wg.Add(1)
	go func() {
		defer wg.Done()
		readErr <- r.read(rctx, repl, msgs, &heard, &blocked)
	}()
	r.confirmed.Store(confirmed)
	cl := newCleanup(cleanupDeps{pool: pool, sql: r.sql, log: r.log, pub: r.pub(), srv: srv, fingerprint: r.fingerprint,
		confirmed: &r.confirmed, settled: r.settled, interval: r.cfg.CleanupInterval, timeout: r.cfg.StatementTimeout,
		retention: r.cfg.Retention, batch: r.cfg.CleanupBatch})
	wg.Add(2)
	go func() {
		defer wg.Done()
		cl.run(rctx)
	}()
	go func() {
		defer wg.Done()
		r.keepCeiling(rctx, pool, repl.PID())
	}()
	defer func() {
		// Stopping the reader closes the connection (pgconn's reads end
		// with it), which frees the slot for a standby: the lanes end
		// their publishes first.
		ls.stop()
		stopReader()
		wg.Wait()
	}()

	dec := newDecoder(r.cfg.Table.Schema, r.tableName(), prefix)
	var (
		queue    []*txn // dispatched, not yet confirmed, in commit order
		open     *txn   // between Begin and Commit: the part not yet dispatched
		final    uint64 // the open transaction's commit position (Begin's FinalLSN)
		inflight int    // events in queue
		sent     = confirmed
		part     = max(1, min(maxPart, r.cfg.MaxInFlight/2))
	)
	// dispatch hands t, a transaction or a part of one, to the lanes. The
	// walsender (without pgoutput's streaming) sends a transaction only
	// once it has committed, so a large one's events go out as they
	// arrive, in parts, bounded by MaxInFlight like any others; only its
	// last part carries its end, so the slot is confirmed past it once
	// every part is settled.
	dispatch := func(t *txn, end uint64) error {
		if err := r.tableRows(pool).skipSettled(ctx, t, end, rs); err != nil {
			return err
		}
		queue = append(queue, t)
		inflight += len(t.events)
		r.inflight.Store(int64(inflight))
		ls.push(t)
		return nil
	}
	add := func(ev event) error {
		open.events = append(open.events, ev)
		if len(open.events) < part {
			return nil
		}
		t := open
		open = &txn{}
		return dispatch(t, final)
	}
	advance := func() {
		for len(queue) > 0 && queue[0].pending.Load() == 0 {
			confirmed = max(confirmed, queue[0].end)
			inflight -= len(queue[0].events)
			queue[0] = nil
			queue = queue[1:]
		}
		r.inflight.Store(int64(inflight))
		r.confirmed.Store(confirmed)
	}
	// The server's position stops at the ceiling (see marker).
	reported := func() uint64 { return min(confirmed, r.ceiling.Load()) }
	send := func(reply bool) error {
		_ = repl.Conn().SetWriteDeadline(time.Now().Add(r.cfg.SenderTimeout / 2))
		pos := reported()
		err := pglogrepl.SendStandbyStatusUpdate(ctx, repl, pglogrepl.StandbyStatusUpdate{
			WALWritePosition: pglogrepl.LSN(pos), ReplyRequested: reply})
		if err != nil {
			return fmt.Errorf("send status update: %w", err)
		}
		sent = pos
		return nil
	}
	flush := time.NewTicker(r.cfg.FlushInterval)
	defer flush.Stop()
	ping := time.NewTicker(r.cfg.PingInterval)
	defer ping.Stop()
	for {
		in := msgs
		if inflight >= r.cfg.MaxInFlight {
			in = nil // hold: the reader stops, the server waits; pings go on
		}
		select {
		case <-ctx.Done():
			return r.drain(ls, &queue, advance, send)
		case err := <-readErr:
			return err
		case err := <-cl.failed:
			return err
		case <-ls.settled:
			advance()
		case <-flush.C:
			advance()
			if reported() > sent {
				if err := send(false); err != nil {
					return err
				}
			}
		case <-ping.C:
			if time.Since(time.Unix(0, heard.Load())) > r.cfg.SenderTimeout/2 {
				if !blocked.Load() {
					return fmt.Errorf("no message from the server for %s: giving up the slot before the server frees it for a standby", r.cfg.SenderTimeout/2)
				}
				// Held at MaxInFlight the reader hears nothing: ask the
				// server on another connection whether this relay still
				// holds the slot, or stop publishing.
				if err := r.stillHolds(ctx, pool, repl.PID()); err != nil {
					return err
				}
			}
			advance()
			if err := send(true); err != nil {
				return err
			}
		case m := <-in:
			if m.keepalive {
				if open == nil && len(queue) == 0 && m.walEnd > confirmed {
					confirmed = m.walEnd
					r.confirmed.Store(confirmed)
				}
				if m.reply {
					if err := send(false); err != nil {
						return err
					}
				}
				continue
			}
			switch msg := m.msg.(type) {
			case *pglogrepl.RelationMessage:
				dec.relation(msg)
			case *pglogrepl.BeginMessage:
				open, final = &txn{}, uint64(msg.FinalLSN)
			case *insertMessage:
				ev, ok, err := dec.insert(msg)
				var bad *rowError
				if errors.As(err, &bad) {
					// Marked dead by the lanes, as the loop must go on
					// answering the server meanwhile.
					ev, ok, err = event{row: bad.row, bad: bad}, true, nil
				}
				if err != nil {
					return fmt.Errorf("%w: %w", errPermanent, err)
				}
				if ok && open != nil {
					if err := add(ev); err != nil {
						return err
					}
				}
			case *pglogrepl.LogicalDecodingMessage:
				ev, ok, err := dec.message(msg)
				if err != nil {
					return fmt.Errorf("%w: %w", errPermanent, err)
				}
				switch {
				case !ok:
				case open == nil || !msg.Transactional:
					r.log.Warn("ignored a non-transactional event message; the writer emits transactional ones", "lsn", msg.LSN)
				default:
					if err := add(ev); err != nil {
						return err
					}
				}
			case *pglogrepl.CommitMessage:
				if open == nil {
					return fmt.Errorf("commit at %s without a begin", msg.CommitLSN)
				}
				open.end = uint64(msg.TransactionEndLSN)
				if err := dispatch(open, open.end); err != nil {
					return err
				}
				open = nil
			}
		}
	}
}

// maxPart is the most events of a transaction handed to the lanes at once.
const maxPart = 256

// stillHolds returns an error unless the walsender of process pid holds
// the slot, within SenderTimeout/4.
func (r *Relay) stillHolds(ctx context.Context, pool *pgxpool.Pool, pid uint32) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.SenderTimeout/4)
	defer cancel()
	var lsn string
	if err := pool.QueryRow(ctx, r.sql.ceiling, outboxsql.CeilingArgs{Slot: r.cfg.Slot, PID: pid}.Args()...).Scan(&lsn); err != nil {
		return fmt.Errorf("giving up the slot: cannot tell it is still this relay's: %w", err)
	}
	return nil
}

// drain is the clean end of a stream: stop reading, let the events in
// flight settle for up to SenderTimeout/2, report the position reached.
func (r *Relay) drain(ls *lanes, queue *[]*txn, advance func(), send func(bool) error) error {
	limit := time.NewTimer(r.cfg.SenderTimeout / 2)
	defer limit.Stop()
	for advance(); len(*queue) > 0; advance() {
		select {
		case <-ls.settled:
		case <-limit.C:
			r.log.Warn("stopping with events in flight; they are published again by the next relay", "transactions", len(*queue))
			return send(false)
		}
	}
	return send(false)
}

// read receives the stream and hands its messages to the loop, in order.
func (r *Relay) read(ctx context.Context, repl *pgconn.PgConn, out chan<- inMsg, heard *atomic.Int64, blocked *atomic.Bool) error {
	for {
		raw, err := repl.ReceiveMessage(ctx)
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		heard.Store(time.Now().UnixNano())
		var m inMsg
		switch raw := raw.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(raw))
		case *pgproto3.CopyDone:
			return errors.New("replication stream ended by the server")
		case *pgproto3.CopyData:
			if len(raw.Data) == 0 {
				continue
			}
			switch raw.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				k, err := pglogrepl.ParsePrimaryKeepaliveMessage(raw.Data[1:])
				if err != nil {
					return err
				}
				m = inMsg{keepalive: true, walEnd: uint64(k.ServerWALEnd), reply: k.ReplyRequested}
			case pglogrepl.XLogDataByteID:
				// The buffer is the connection's: copy before the next receive.
				x, err := pglogrepl.ParseXLogData(bytes.Clone(raw.Data[1:]))
				if err != nil {
					return err
				}
				if m.msg, err = parseMessage(x.WALData); err != nil {
					return fmt.Errorf("decode message at %s: %w", x.WALStart, err)
				}
			default:
				continue
			}
		default:
			continue
		}
		select {
		case out <- m:
		default:
			blocked.Store(true)
			select {
			case out <- m:
			case <-ctx.Done():
				return ctx.Err()
			}
			blocked.Store(false)
			heard.Store(time.Now().UnixNano())
		}
	}
}

// tableName is the outbox table's unqualified name.
// messagePrefix resolves the prefix of the table's table-less event
// messages on this connection (see outboxsql.WALMessagePrefix).
func (r *Relay) messagePrefix(ctx context.Context, q pgxQuerier) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
	defer cancel()
	var prefix string
	if err := q.QueryRow(ctx, r.sql.messagePrefix, r.sql.table).Scan(&prefix); err != nil {
		return "", fmt.Errorf("walrelay: resolve the table %s: %w", r.names.Table, err)
	}
	return prefix, nil
}

func (r *Relay) tableName() string {
	if r.cfg.Table.Name == "" {
		return outboxsql.TableNameDefault
	}
	return r.cfg.Table.Name
}

func quoteLiteral(s string) string { return outboxsql.Literal(s) }
