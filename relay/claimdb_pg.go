package relay

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// pgClaimDB is the claim cycle on PostgreSQL: Claim (with ClaimSettings
// and MarkUndecodable), MarkPublished, Fail and Release, through pgx when
// the pool's driver is pgx and database/sql otherwise. A row's version is
// the claim's xmin, a uint32.
type pgClaimDB struct {
	db *sql.DB
	// conns lends the claims their connections in a Group; nil: the
	// pool's (db).
	conns   *claimConns
	tx      *tableTx // runs the marks
	sql     *statements
	timeout time.Duration // Config.StatementTimeout
	lock    time.Duration // Config.LockTimeout
}

var _ claimDB = (*pgClaimDB)(nil)

func newPGClaimDB(db *sql.DB, conns *claimConns, tx *tableTx, q *statements, cfg Config) *pgClaimDB {
	return &pgClaimDB{db: db, conns: conns, tx: tx, sql: q, timeout: cfg.StatementTimeout, lock: cfg.LockTimeout}
}

func (p *pgClaimDB) claim(ctx context.Context, cp claimParams) ([]*claimedRow, []undecodableRow, error) {
	q := claimQuery{
		claim: outboxsql.ClaimArgs{Owner: cp.owner, Limit: cp.limit, Lease: cp.lease, Shards: cp.shards, Bytes: cp.bytes, Low: cp.low}.Args(),
		owner: cp.owner,
	}
	out, bad, err := p.runClaim(ctx, q)
	if err != nil {
		return out, nil, err // out: the rows of a claim whose commit was not confirmed
	}
	// UPDATE ... RETURNING does not keep the subquery's order.
	slices.SortFunc(out, func(a, b *claimedRow) int { return cmp.Compare(a.id, b.id) })
	var undecodable []undecodableRow
	for _, b := range bad {
		undecodable = append(undecodable, undecodableRow{id: b.ID, err: b.Err})
	}
	return out, undecodable, nil
}

// mark runs a MarkPublished per claim, in one transaction (tableTx: while
// the table is locked out it fails with errLockedOut).
func (p *pgClaimDB) mark(ctx context.Context, rows []claimRef) error {
	marks, err := marksByClaim(rows)
	if err != nil {
		return err
	}
	steps := make([]step, 0, len(marks))
	for _, m := range marks {
		steps = append(steps, step{query: p.sql.markPublished, args: m.Args()})
	}
	return p.tx.steps(ctx, steps...)
}

// settle runs Fail, a Release per owner and a MarkPublished per claim in
// one transaction under SettleSettings.
func (p *pgClaimDB) settle(ctx context.Context, s settlement) ([]failOutcome, error) {
	marks, err := marksByClaim(s.marks)
	if err != nil {
		return nil, err
	}
	var outcomes []failOutcome
	_, err = settle(ctx, p.db, p.sql, p.timeout, p.lock, func(tx *sql.Tx) (int64, error) {
		var err error
		if len(s.fails) > 0 {
			if outcomes, err = p.fail(ctx, tx, s.fails, s.maxAttempts); err != nil {
				return 0, err
			}
		}
		if len(s.releases) > 0 {
			for owner, ids := range byOwner(s.releases) {
				if _, err := tx.ExecContext(ctx, p.sql.release, outboxsql.RowsArgs{IDs: ids, Owner: owner}.Args()...); err != nil {
					return 0, fmt.Errorf("release %d rows: %w", len(ids), err)
				}
			}
		}
		for _, m := range marks {
			if _, err := tx.ExecContext(ctx, p.sql.markPublished, m.Args()...); err != nil {
				return 0, fmt.Errorf("mark %d published: %w", len(m.IDs), err)
			}
		}
		return 0, nil
	})
	if err != nil {
		return nil, err
	}
	return outcomes, nil
}

// fail runs Fail in tx and returns the outcomes of the failures recorded.
func (p *pgClaimDB) fail(ctx context.Context, tx *sql.Tx, fails []rowFailure, maxAttempts int) ([]failOutcome, error) {
	doc := make([]outboxsql.Failure, len(fails))
	for i, f := range fails {
		doc[i] = outboxsql.Failure{ID: f.id, Owner: f.owner, Err: f.err, Permanent: f.permanent, DelayMS: f.delay.Milliseconds()}
	}
	args, err := outboxsql.FailArgs{Failures: doc, MaxAttempts: maxAttempts}.Args()
	if err != nil {
		return nil, fmt.Errorf("encode failures: %w", err)
	}
	rows, err := tx.QueryContext(ctx, p.sql.fail, args...)
	if err != nil {
		return nil, fmt.Errorf("record %d failures: %w", len(fails), err)
	}
	defer rows.Close()
	var out []failOutcome
	for rows.Next() {
		var (
			id    int64
			state string
		)
		if err := rows.Scan(&id, &state); err != nil {
			return nil, fmt.Errorf("record failures: %w", err)
		}
		out = append(out, failOutcome{id: id, dead: state == "dead"})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("record failures: %w", err)
	}
	return out, nil
}

// release runs a Release per owner in one transaction under
// SettleSettings.
func (p *pgClaimDB) release(ctx context.Context, rows []claimRef) (int64, error) {
	return settle(ctx, p.db, p.sql, p.timeout, p.lock, func(tx *sql.Tx) (int64, error) {
		var n int64
		for owner, ids := range byOwner(rows) {
			res, err := tx.ExecContext(ctx, p.sql.release, outboxsql.RowsArgs{IDs: ids, Owner: owner}.Args()...)
			if err != nil {
				return 0, err
			}
			m, _ := res.RowsAffected()
			n += m
		}
		return n, nil
	})
}

// claimQuery is one claim: ClaimSettings' and Claim's parameters, and
// the incarnation it claims for (MarkUndecodable's owner).
type claimQuery struct {
	settings, claim []any
	owner           string
}

// rowScanner is what scanClaimed reads: *sql.Rows or pgx.Rows.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// claimTx is the claim's transaction on one connection, through pgx
// (pgxClaim) or another database/sql driver (sqlClaim).
type claimTx interface {
	// begin runs BEGIN, ClaimSettings and Claim, and returns Claim's rows.
	begin(ctx context.Context, settings string, settingsArgs []any, claim string, claimArgs []any) (rowScanner, error)
	// endRows closes the rows begin returned.
	endRows() error
	exec(ctx context.Context, query string, args ...any) error
	commit(ctx context.Context) error
	// rollback ends the transaction after an error (a no-op once it
	// ended).
	rollback(ctx context.Context)
}

// runClaim runs the claim's transaction on one connection (the pool's,
// or in a Group one of its claim connections):
// BEGIN, ClaimSettings and Claim, then, once its rows are read and any
// undecodable ones made dead, COMMIT. With the pgx driver the first three
// are sent at once, so a claim costs two round trips instead of four: with
// many small claims (a hundred tables each written ten times a second,
// tenant-fairness) the round trips were most of the claims' cost. The
// COMMIT stays a step of its own: the rows are read before the claim
// commits, so a claim whose rows could not be read (a deadline, a lost
// connection) is rolled back, never committed with rows the relay does not
// hold. A commit whose reply was lost returns its rows with the error.
func (p *pgClaimDB) runClaim(ctx context.Context, q claimQuery) (out []*claimedRow, bad []outboxsql.RowError, err error) {
	conn, kept, done, err := p.conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("claim batch: get connection: %w", err)
	}
	// Whether the claim left the connection unfit to be kept: known from
	// pgx's state (a claim the server failed, on a lock or its own
	// timeout, leaves it idle and its plans worth keeping; one whose
	// context ended first leaves it closed), assumed from the error
	// without pgx.
	broken := true
	defer func() { done(broken) }()
	// Set once the connection is in hand, from what the wait for it left.
	q.settings = outboxsql.ClaimSettingsArgs{
		TxTimeoutArgs: outboxsql.TxTimeoutArgs{Wait: serverTimeout(ctx, p.timeout), Idle: p.timeout, Lock: p.lock},
		Table:         p.sql.table,
	}.Args()
	err = conn.Raw(func(dc any) error {
		pc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return errNotPgx
		}
		out, bad, err = p.claimOn(ctx, &pgxClaim{conn: pc.Conn(), sessionLock: kept}, q)
		broken = pc.Conn().IsClosed() || pc.Conn().PgConn().IsBusy() || pc.Conn().PgConn().TxStatus() != 'I'
		return err
	})
	if errors.Is(err, errNotPgx) {
		out, bad, err = p.claimOn(ctx, &sqlClaim{conn: conn}, q)
		broken = err != nil
	}
	return out, bad, err
}

// conn lends the claim a connection, the group's (claimConns) or the
// pool's, whether it is one the group keeps (whose session's lock timeout
// is the claim's), and the function that gives it back, told whether the
// claim left it unfit to be kept.
func (p *pgClaimDB) conn(ctx context.Context) (conn *sql.Conn, kept bool, done func(broken bool), err error) {
	if p.conns == nil {
		conn, err := p.db.Conn(ctx)
		if err != nil {
			return nil, false, nil, err
		}
		return conn, false, func(bool) { conn.Close() }, nil
	}
	cc, err := p.conns.get(ctx)
	if err != nil {
		return nil, false, nil, err
	}
	return cc.conn, !cc.pooled, func(broken bool) { p.conns.put(cc, broken) }, nil
}

// claimOn runs the claim's transaction t: the claim, its rows read, the
// undecodable ones made dead in it, and its commit. A commit that failed
// may have committed: its rows are returned with the error.
func (p *pgClaimDB) claimOn(ctx context.Context, t claimTx, q claimQuery) (out []*claimedRow, bad []outboxsql.RowError, err error) {
	defer func() {
		if err != nil {
			t.rollback(ctx)
		}
	}()
	rows, err := t.begin(ctx, p.sql.claimSettings, q.settings, p.sql.claim, q.claim)
	if err != nil {
		return nil, nil, fmt.Errorf("claim batch: %w", err)
	}
	out, bad, err = scanClaimed(rows)
	if cerr := t.endRows(); err == nil && cerr != nil {
		err = fmt.Errorf("claim batch: %w", cerr)
	}
	if err != nil {
		return nil, nil, err
	}
	if len(bad) > 0 {
		args, err := outboxsql.MarkUndecodableArgs{Rows: bad, Owner: q.owner}.Args()
		if err != nil {
			return nil, nil, fmt.Errorf("claim batch: encode undecodable rows: %w", err)
		}
		if err := t.exec(ctx, p.sql.markUndecodable, args...); err != nil {
			return nil, nil, fmt.Errorf("claim batch: mark undecodable rows dead: %w", err)
		}
	}
	if err := t.commit(ctx); err != nil {
		return out, nil, fmt.Errorf("claim batch: commit: %w", err)
	}
	return out, bad, nil
}

// pgxClaim is the claim's transaction on a pgx connection: BEGIN and the
// two statements in one batch. Were the connection left in the
// transaction, database/sql would discard it rather than hand it out again
// (pgx's ResetSession), and a Group's claim connections close it
// (runClaim).
//
// pgx prepares a statement it has not prepared on the connection before
// it sends the batch, outside the transaction and its lock timeout, and
// preparing the claim locks the table. So the batch is one only on a
// claim connection a Group keeps, whose session has the lock timeout
// (sessionLock: see claimConns); on another, BEGIN and the settings go
// first, in a round trip of their own.
type pgxClaim struct {
	conn        *pgx.Conn
	sessionLock bool
	batch       pgx.BatchResults
	rows        pgx.Rows
}

func (p *pgxClaim) begin(ctx context.Context, settings string, settingsArgs []any, claim string, claimArgs []any) (rowScanner, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(settings, settingsArgs...)
	if !p.sessionLock {
		if err := p.conn.SendBatch(ctx, b).Close(); err != nil {
			return nil, fmt.Errorf("settings: %w", err)
		}
		b = &pgx.Batch{}
	}
	b.Queue(claim, claimArgs...)
	p.batch = p.conn.SendBatch(ctx, b)
	if p.sessionLock {
		for _, step := range []string{"begin", "settings"} {
			if _, err := p.batch.Exec(); err != nil {
				_ = p.endRows()
				return nil, fmt.Errorf("%s: %w", step, err)
			}
		}
	}
	rows, err := p.batch.Query()
	if err != nil {
		_ = p.endRows()
		return nil, err
	}
	p.rows = rows
	return rows, nil
}

func (p *pgxClaim) endRows() error {
	if p.rows != nil {
		p.rows.Close()
	}
	return p.batch.Close()
}

func (p *pgxClaim) exec(ctx context.Context, query string, args ...any) error {
	_, err := p.conn.Exec(ctx, query, args...)
	return err
}

func (p *pgxClaim) commit(ctx context.Context) error {
	tag, err := p.conn.Exec(ctx, "COMMIT")
	if err == nil && tag.String() != "COMMIT" {
		err = errors.New("the transaction was rolled back")
	}
	return err
}

func (p *pgxClaim) rollback(ctx context.Context) { rollbackPgx(ctx, p.conn) }

// sqlClaim is the claim's transaction through database/sql, with a
// driver other than pgx: four round trips.
type sqlClaim struct {
	conn *sql.Conn
	tx   *sql.Tx
	rows *sql.Rows
}

func (s *sqlClaim) begin(ctx context.Context, settings string, settingsArgs []any, claim string, claimArgs []any) (rowScanner, error) {
	tx, err := s.conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	s.tx = tx
	if _, err := tx.ExecContext(ctx, settings, settingsArgs...); err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	if s.rows, err = tx.QueryContext(ctx, claim, claimArgs...); err != nil {
		return nil, err
	}
	return s.rows, nil
}

func (s *sqlClaim) endRows() error { return s.rows.Close() }

func (s *sqlClaim) exec(ctx context.Context, query string, args ...any) error {
	_, err := s.tx.ExecContext(ctx, query, args...)
	return err
}

func (s *sqlClaim) commit(context.Context) error { return s.tx.Commit() }

func (s *sqlClaim) rollback(context.Context) {
	if s.tx != nil {
		_ = s.tx.Rollback() // a no-op after Commit
	}
}

// scanClaimed reads claimed rows. A row that cannot become a message (its
// headers are not a JSON object of strings) is returned in bad instead, to
// be made dead: one bad row must not fail every claim.
func scanClaimed(rows rowScanner) (out []*claimedRow, bad []outboxsql.RowError, err error) {
	for rows.Next() {
		var (
			c       = &claimedRow{}
			eventID []byte // text, or with pgx 16 bytes
			headers []byte // a jsonb's text (pgx cannot scan jsonb into sql.RawBytes)
			version uint32 // the claim's xmin
		)
		e := &c.event
		if err := rows.Scan(&c.id, &eventID, &e.Topic, &e.AggregateType, &e.AggregateID, &e.Type,
			&e.ContentType, &e.Payload, &headers, &e.CreatedAt, &c.attempts, &version); err != nil {
			return nil, nil, fmt.Errorf("claim batch: scan: %w", err)
		}
		c.version = version
		if e.ID, err = decodeUUID(eventID); err != nil {
			bad = append(bad, outboxsql.RowError{ID: c.id, Err: storableText("undecodable event: event_id: "+err.Error(), maxErrorText)})
			continue
		}
		if string(headers) != "{}" {
			if err := json.Unmarshal(headers, &e.Headers); err != nil {
				bad = append(bad, outboxsql.RowError{ID: c.id, Err: storableText("undecodable event: headers must be a JSON object of strings: "+err.Error(), maxErrorText)})
				continue
			}
		}
		c.bytes = int64(len(e.Payload))
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("claim batch: %w", err)
	}
	return out, bad, nil
}

// decodeUUID reads an event id as the driver returned it: text, as the
// database/sql drivers for PostgreSQL send a uuid, or its 16 bytes, should
// a driver use the binary format.
func decodeUUID(b []byte) (uuid.UUID, error) {
	if len(b) == 16 {
		return uuid.FromBytes(b)
	}
	return uuid.ParseBytes(b)
}

// marksByClaim groups acknowledged rows into one mark per claim: the rows
// of one incarnation's claim share their version (outboxsql.MarkPublished).
// A flush usually holds acknowledgements of one or two claims.
func marksByClaim(rows []claimRef) ([]outboxsql.MarkArgs, error) {
	type claim struct {
		owner   string
		version uint32
	}
	var (
		out []outboxsql.MarkArgs
		at  = make(map[claim]int, 2)
	)
	for _, row := range rows {
		version, ok := row.version.(uint32)
		if !ok {
			return nil, fmt.Errorf("row %d: claim version %T is not a PostgreSQL claim's", row.id, row.version)
		}
		k := claim{row.owner, version}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, outboxsql.MarkArgs{Owner: k.owner, Version: k.version})
		}
		out[i].IDs = append(out[i].IDs, row.id)
	}
	return out, nil
}

// byOwner groups rows' ids by the incarnation that claimed them.
func byOwner(rows []claimRef) map[string][]int64 {
	out := make(map[string][]int64, 1)
	for _, row := range rows {
		out[row.owner] = append(out[row.owner], row.id)
	}
	return out
}
