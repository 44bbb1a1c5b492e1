package walrelay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/txoutbox"
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

// replicationSlot reads the relay's slot, of the name Run resolved, for
// the relay's database.
type replicationSlot struct {
	name     string
	database string // the relay's: the only one whose slot it streams or drops
	sql      *statements
}

// slot is the relay's slot, by the name resolved.
func (r *Relay) slot() replicationSlot {
	return replicationSlot{name: r.cfg.Slot, database: r.database, sql: r.sql}
}

// state reads the slot's row of pg_replication_slots.
func (sl replicationSlot) state(ctx context.Context, q pgxQuerier) (slotState, error) {
	var (
		s   slotState
		lsn string
	)
	err := q.QueryRow(ctx, sl.sql.slot, sl.name).Scan(&s.active, &s.walStatus, &lsn, &s.plugin, &s.database, &s.lagBytes, &s.here)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("read slot %s: %w", sl.name, err)
	}
	s.exists = true
	l, err := pglogrepl.ParseLSN(lsn)
	if err != nil {
		return s, fmt.Errorf("slot %s: confirmed_flush_lsn %q: %w", sl.name, lsn, err)
	}
	s.confirmed = uint64(l)
	return s, nil
}

// usable rejects a slot the relay cannot stream from.
func (sl replicationSlot) usable(s slotState) error {
	if !s.here {
		return sl.otherDatabase(s, ownSlot)
	}
	if s.walStatus == "lost" {
		return fmt.Errorf("%w: slot %s has wal_status lost: PostgreSQL removed WAL it still needed (max_slot_wal_keep_size), "+
			"so committed events may be missing from the stream; switch to the polling relay with `outbox wal takeover`, which republishes every row the slot did not confirm", ErrSlotLost, sl.name)
	}
	if s.plugin != "pgoutput" {
		return fmt.Errorf("%w: slot %s decodes with %q, not pgoutput", errPermanent, sl.name, s.plugin)
	}
	return nil
}

// otherDatabase is the error of slot s, of another database than the
// relay's, ending with what to do.
func (sl replicationSlot) otherDatabase(s slotState, todo string) error {
	return fmt.Errorf("%w: slot %s is database %s's, not %s's (a slot's name is the server's, the slot one database's): %s",
		ErrSlotOtherDatabase, sl.name, s.database, sl.database, todo)
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
// slotSetup.dropMadePublication).
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
	st, err := r.checkSlot(ctx, pool)
	if err == nil && !st.exists && r.legacySlot {
		if err := r.leaveLegacySlot(ctx, pool); err != nil {
			return err
		}
		st, err = r.checkSlot(ctx, pool)
	}
	if err != nil {
		return err
	}
	fp, err := r.preparePublication(ctx, pool, srv)
	if err != nil {
		return err
	}
	mark, _, err := r.pub().readMarker(ctx, pool)
	if err != nil {
		return err
	}
	dec, err := r.decoding().decoder(ctx, pool)
	if err != nil {
		return err
	}
	repl, err := r.connectReplication(ctx)
	if err != nil {
		return err
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
		if err := newSetup(r.setupDeps(pool, repl, ls), fp).run(ctx); err != nil {
			return err
		}
	}
	// After the setup, whose rows it marked published the stream skips,
	// and before the stream starts: the server waits for no answer yet.
	rs, err := r.resumeFrom(ctx, pool)
	if err != nil {
		return err
	}
	if err := r.startReplication(ctx, repl); err != nil {
		return err
	}
	if st, mark, err = r.stillOwned(ctx, pool, fp); err != nil {
		return err
	}
	r.ceiling.Store(mark.ceiling)
	r.met.sample(st)
	r.active.Store(true)
	defer r.active.Store(false)
	r.log.Info("streaming", "publication", r.cfg.Publication, "from", pglogrepl.LSN(st.confirmed))
	s := newStream(r.streamDeps(pool, repl, ls, dec, rs), st.confirmed)
	return s.run(ctx, newCleanup(r.cleanupDeps(pool, srv, fp)), r.ceilingKeeper(pool, repl.PID(), fp))
}

// streamDeps is what a session's stream reads the slot with.
func (r *Relay) streamDeps(pool *pgxpool.Pool, repl *pgconn.PgConn, ls *lanes, dec *decoder, rs resume) streamDeps {
	return streamDeps{repl: repl, pool: pool, sql: r.sql, log: r.log, slot: r.cfg.Slot, lanes: ls, rows: r.tableRows(pool), resume: rs,
		decoder: dec, confirmedTo: &r.confirmed, inflightNow: &r.inflight, ceiling: &r.ceiling,
		maxInFlight: r.cfg.MaxInFlight, flushInterval: r.cfg.FlushInterval, pingInterval: r.cfg.PingInterval, senderTimeout: r.cfg.SenderTimeout}
}

// cleanupDeps is what a session's cleanup works with, the publication of
// fingerprint fp checked as it goes.
func (r *Relay) cleanupDeps(pool *pgxpool.Pool, srv serverFacts, fp string) cleanupDeps {
	return cleanupDeps{pool: pool, sql: r.sql, log: r.log, pub: r.pub(), srv: srv, fingerprint: fp,
		confirmed: &r.confirmed, settled: r.settled, interval: r.cfg.CleanupInterval, timeout: r.cfg.StatementTimeout,
		retention: r.cfg.Retention, batch: r.cfg.CleanupBatch}
}

// ceilingKeeper is a session's, streaming on the walsender of process pid
// through the publication of fingerprint fp.
func (r *Relay) ceilingKeeper(pool *pgxpool.Pool, pid uint32, fp string) *ceilingKeeper {
	return &ceilingKeeper{pool: pool, pid: pid, pub: r.pub(), fingerprint: fp, confirmed: &r.confirmed, settled: r.settled, ceiling: &r.ceiling}
}

// checkSlot reads the slot and refuses one the relay cannot stream from
// now: unusable (see usable), held by another relay (errSlotBusy), or
// whose publication was dropped.
func (r *Relay) checkSlot(ctx context.Context, pool *pgxpool.Pool) (slotState, error) {
	st, err := r.slot().state(ctx, pool)
	if err != nil || !st.exists {
		return st, err
	}
	if err := r.slot().usable(st); err != nil {
		return st, err
	}
	if st.active {
		// Another relay streams: rows it settles are not in this relay's
		// highest settled row, which it reads afresh from the marker when
		// it takes the slot over (after a crash of PostgreSQL the stream
		// would bring them again).
		r.settled.forget()
		return st, errSlotBusy
	}
	if _, ok, err := r.pub().comment(ctx, pool); err != nil {
		return st, err
	} else if !ok {
		return st, r.pub().gone()
	}
	return st, nil
}

// preparePublication creates the publication if need be, checks it and
// returns its fingerprint; on a publication that does not carry every
// insert it clears the relay's marker (see publication.disown).
func (r *Relay) preparePublication(ctx context.Context, pool *pgxpool.Pool, srv serverFacts) (string, error) {
	if err := r.ensurePublication(ctx, pool, srv); err != nil {
		return "", err
	}
	fp, err := r.pub().check(ctx, pool, srv)
	if errors.Is(err, ErrPublication) {
		r.pub().disown(ctx, pool)
	}
	return fp, err
}

// connectReplication opens the replication connection.
func (r *Relay) connectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	rc, err := r.replicationConfig()
	if err != nil {
		return nil, err
	}
	repl, err := pgconn.ConnectConfig(ctx, rc)
	if err != nil {
		return nil, fmt.Errorf("open replication connection: %w", err)
	}
	return repl, nil
}

// startReplication starts streaming from the slot on repl: errSlotBusy
// when another relay holds it.
func (r *Relay) startReplication(ctx context.Context, repl *pgconn.PgConn) error {
	err := pglogrepl.StartReplication(ctx, repl, r.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
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
	return nil
}

// stillOwned makes sure, holding the slot now, that no relay is
// initialising it and the slot is still the one the relay owns through
// the publication of fingerprint fp: one that created it publishes the
// table's earlier rows before anything streamed, or they would go out
// after later events. It returns the slot and the marker read.
func (r *Relay) stillOwned(ctx context.Context, pool *pgxpool.Pool, fp string) (slotState, marker, error) {
	mark, _, err := r.pub().readMarker(ctx, pool)
	if err != nil {
		return slotState{}, mark, err
	}
	st, err := r.slot().state(ctx, pool)
	if err != nil {
		return st, mark, err
	}
	if !st.exists {
		return st, mark, fmt.Errorf("slot %s is gone", r.cfg.Slot)
	}
	if err := r.slot().usable(st); err != nil {
		return st, mark, err
	}
	if !r.pub().owns(mark, st, fp) {
		return st, mark, errSlotBusy
	}
	return st, mark, nil
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
// settled looks nothing up, rather than a query per transaction of the
// backlog.
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

// decoding makes the decoders of the table's changes.
type decoding struct {
	sql     *statements
	timeout time.Duration // Config.StatementTimeout
	table   txoutbox.Table
	name    string // the table's, for messages
}

// decoding is the relay's.
func (r *Relay) decoding() decoding {
	return decoding{sql: r.sql, timeout: r.cfg.StatementTimeout, table: r.cfg.Table, name: r.names.Table}
}

// decoder resolves, through q, the prefix of the table's table-less event
// messages (see outboxsql.WALMessagePrefix) and returns a decoder of the
// table's changes.
func (d decoding) decoder(ctx context.Context, q pgxQuerier) (*decoder, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	var prefix string
	if err := q.QueryRow(ctx, d.sql.messagePrefix, d.sql.table).Scan(&prefix); err != nil {
		return nil, fmt.Errorf("walrelay: resolve the table %s: %w", d.name, err)
	}
	name := d.table.Name
	if name == "" {
		name = outboxsql.TableNameDefault
	}
	return newDecoder(d.table.Schema, name, prefix), nil
}

func quoteLiteral(s string) string { return outboxsql.Literal(s) }
