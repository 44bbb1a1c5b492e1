package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// tableTx runs the relay's statements on its table and the table's
// companions that run outside the claim's and settle's transactions
// (heartbeats, shard moves, marks, claim floor rounds, stats readings),
// each in a transaction of its own that sets the server's timeouts first
// (outboxsql.TxTimeouts): the statement, its parse included, waits
// LockTimeout at most for a lock another session holds, and the server,
// not the client's deadline, ends it. Run on its own, a statement whose
// parse waits on a lock (its first on a connection, or after its plan
// was let go) waits with no timeout until the client's deadline closes
// the connection, and its backend goes on waiting until the lock is
// released: a locked table filled the pool, and the server, with them.
//
// With pgx it costs one round trip more than the statements alone (BEGIN
// and the settings, then the statements and COMMIT): they are prepared in
// the transaction, so their plans are kept as before. Statements that
// name no table go in one round trip (catalog). With another driver, a
// round trip each, and three more.
//
// While the table is locked out (see lockout), a statement does not run:
// it fails with errLockedOut, so that a round begun before the lock ends
// at its next statement instead of waiting LockTimeout at each.
type tableTx struct {
	db       *sql.DB
	settings string        // outboxsql.TxTimeouts
	walkSQL  string        // outboxsql.WalkSettings, for walk
	timeout  time.Duration // Config.StatementTimeout
	lock     time.Duration // Config.LockTimeout
	out      *lockout
}

// step is one statement of a tableTx transaction: its query and
// arguments; scan, when not nil, reads its rows, and affected, when not
// nil, gets how many rows it affected (with pgx; 0 for a query through
// another driver).
type step struct {
	query    string
	args     []any
	scan     func(rowScanner) error
	affected *int64
}

// exec runs query and returns how many rows it affected.
func (t *tableTx) exec(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := t.run(ctx, nil, false, t.settings, step{query: query, args: args, affected: &n})
	return n, err
}

// query runs query and reads its rows with scan.
func (t *tableTx) query(ctx context.Context, scan func(rowScanner) error, query string, args ...any) error {
	return t.run(ctx, nil, false, t.settings, step{query: query, args: args, scan: scan})
}

// queryOn is query on conn, a connection the caller holds.
func (t *tableTx) queryOn(ctx context.Context, conn *sql.Conn, scan func(rowScanner) error, query string, args ...any) error {
	return t.run(ctx, conn, false, t.settings, step{query: query, args: args, scan: scan})
}

// steps runs the statements of steps, in order, in one transaction.
func (t *tableTx) steps(ctx context.Context, steps ...step) error {
	return t.run(ctx, nil, false, t.settings, steps...)
}

// walk runs steps in one transaction under outboxsql.WalkSettings: the
// statements that walk an index in order up to a limit.
func (t *tableTx) walk(ctx context.Context, steps ...step) error {
	return t.run(ctx, nil, false, t.walkSQL, steps...)
}

// catalog runs steps, in one transaction, whose statements name no table
// (they read catalogs, take advisory locks): parsing them waits for no
// lock, so with pgx BEGIN, the settings, they and COMMIT go in one round
// trip.
func (t *tableTx) catalog(ctx context.Context, steps ...step) error {
	return t.run(ctx, nil, true, t.settings, steps...)
}

// scanRow returns a scan that reads a query's one row into dest, and
// fails with sql.ErrNoRows when there is none.
func scanRow(dest ...any) func(rowScanner) error {
	return func(rows rowScanner) error {
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return err
			}
			return sql.ErrNoRows
		}
		return rows.Scan(dest...)
	}
}

// run runs steps in their transaction on conn, or on one of the pool's
// when conn is nil, after settingsSQL (TxTimeouts or WalkSettings, which
// bind the same arguments); with oneBatch, in a single batch (see catalog).
func (t *tableTx) run(ctx context.Context, conn *sql.Conn, oneBatch bool, settingsSQL string, steps ...step) error {
	if t.out.locked() {
		return errLockedOut
	}
	if conn == nil {
		c, err := t.db.Conn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		conn = c
	}
	settings := outboxsql.TxTimeoutArgs{Wait: serverTimeout(ctx, t.timeout), Idle: t.timeout, Lock: t.lock}.Args()
	err := conn.Raw(func(dc any) error {
		pc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return errNotPgx
		}
		return pgxTableTx(ctx, pc.Conn(), settingsSQL, settings, oneBatch, steps)
	})
	if errors.Is(err, errNotPgx) {
		err = sqlTableTx(ctx, conn, settingsSQL, settings, steps)
	}
	return err
}

// pgxTableTx is run's transaction on a pgx connection: BEGIN and the
// settings in one batch, then the statements and COMMIT in another,
// which prepares a statement the connection has not prepared yet inside
// the transaction, under the settings' lock timeout; with oneBatch, all
// in one. A transaction that failed is rolled back, so the connection
// goes back to the pool idle.
func pgxTableTx(ctx context.Context, c *pgx.Conn, settingsSQL string, settings []any, oneBatch bool, steps []step) (err error) {
	defer func() {
		if err != nil {
			rollbackPgx(ctx, c)
		}
	}()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(settingsSQL, settings...)
	if !oneBatch {
		if err := c.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("settings: %w", err)
		}
		b = &pgx.Batch{}
	}
	for _, s := range steps {
		b.Queue(s.query, s.args...)
	}
	b.Queue("COMMIT")
	br := c.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if oneBatch {
		for _, what := range []string{"begin", "settings"} {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		}
	}
	for _, s := range steps {
		if err := pgxStep(br, s); err != nil {
			return err
		}
	}
	tag, err := br.Exec()
	if err == nil && tag.String() != "COMMIT" {
		err = errors.New("the transaction was rolled back")
	}
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// pgxStep reads the result of s from br.
func pgxStep(br pgx.BatchResults, s step) error {
	var tag pgconn.CommandTag
	if s.scan != nil {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		err = s.scan(rows)
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err != nil {
			return err
		}
		tag = rows.CommandTag()
	} else {
		var err error
		if tag, err = br.Exec(); err != nil {
			return err
		}
	}
	if s.affected != nil {
		*s.affected = tag.RowsAffected()
	}
	return nil
}

// rollbackPgx ends the transaction a failed statement left open on c, if
// any, within a second of its own.
func rollbackPgx(ctx context.Context, c *pgx.Conn) {
	if c.IsClosed() || c.PgConn().TxStatus() == 'I' {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = c.Exec(rctx, "ROLLBACK")
}

// sqlTableTx is run's transaction through database/sql, with a driver
// other than pgx.
func sqlTableTx(ctx context.Context, conn *sql.Conn, settingsSQL string, settings []any, steps []step) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, settingsSQL, settings...); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	for _, s := range steps {
		if s.scan == nil {
			res, err := tx.ExecContext(ctx, s.query, s.args...)
			if err != nil {
				return err
			}
			if s.affected != nil {
				*s.affected, _ = res.RowsAffected()
			}
			continue
		}
		rows, err := tx.QueryContext(ctx, s.query, s.args...)
		if err != nil {
			return err
		}
		err = s.scan(rows)
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = rows.Err()
		}
		if err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
