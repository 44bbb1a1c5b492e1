package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

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
// With pgx it costs one round trip more than the statement alone
// (BEGIN and the settings, then the statement and COMMIT): the
// statement is prepared in the transaction, so its plan is kept as
// before. With another driver, four.
//
// While the table is locked out (see lockout), a statement does not run:
// it fails with errLockedOut, so that a round begun before the lock ends
// at its next statement instead of waiting LockTimeout at each.
type tableTx struct {
	db       *sql.DB
	settings string        // outboxsql.TxTimeouts
	timeout  time.Duration // Config.StatementTimeout
	lock     time.Duration // Config.LockTimeout
	out      *lockout
}

// exec runs query and returns how many rows it affected.
func (t *tableTx) exec(ctx context.Context, query string, args ...any) (int64, error) {
	return t.run(ctx, nil, nil, query, args...)
}

// query runs query and reads its rows with scan.
func (t *tableTx) query(ctx context.Context, scan func(rowScanner) error, query string, args ...any) error {
	_, err := t.run(ctx, nil, scan, query, args...)
	return err
}

// queryOn is query on conn, a connection the caller holds.
func (t *tableTx) queryOn(ctx context.Context, conn *sql.Conn, scan func(rowScanner) error, query string, args ...any) error {
	_, err := t.run(ctx, conn, scan, query, args...)
	return err
}

// scanRow returns a scan for query that reads its one row into dest, and
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

// run runs query in its transaction on conn, or on one of the pool's when
// conn is nil; scan, when not nil, reads its rows. It returns the rows
// query affected (with pgx; 0 for a query through another driver).
func (t *tableTx) run(ctx context.Context, conn *sql.Conn, scan func(rowScanner) error, query string, args ...any) (int64, error) {
	if t.out.locked() {
		return 0, errLockedOut
	}
	if conn == nil {
		c, err := t.db.Conn(ctx)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		conn = c
	}
	settings := outboxsql.TxTimeoutArgs{Wait: serverTimeout(ctx, t.timeout), Idle: t.timeout, Lock: t.lock}.Args()
	var n int64
	err := conn.Raw(func(dc any) error {
		pc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return errNotPgx
		}
		var err error
		n, err = pgxTableTx(ctx, pc.Conn(), t.settings, settings, scan, query, args)
		return err
	})
	if errors.Is(err, errNotPgx) {
		n, err = sqlTableTx(ctx, conn, t.settings, settings, scan, query, args)
	}
	return n, err
}

// pgxTableTx is run's transaction on a pgx connection: BEGIN and the
// settings in one batch, then the statement and COMMIT in another. The
// second batch prepares the statement, when the connection has not yet,
// inside the transaction, under the settings' lock timeout. A
// transaction that failed is rolled back, so the connection goes back to
// the pool idle.
func pgxTableTx(ctx context.Context, c *pgx.Conn, settingsSQL string, settings []any, scan func(rowScanner) error, query string, args []any) (n int64, err error) {
	defer func() {
		if err != nil {
			rollbackPgx(ctx, c)
		}
	}()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(settingsSQL, settings...)
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("settings: %w", err)
	}
	b = &pgx.Batch{}
	b.Queue(query, args...)
	b.Queue("COMMIT")
	br := c.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if scan != nil {
		rows, err := br.Query()
		if err != nil {
			return 0, err
		}
		err = scan(rows)
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err != nil {
			return 0, err
		}
		n = rows.CommandTag().RowsAffected()
	} else {
		tag, err := br.Exec()
		if err != nil {
			return 0, err
		}
		n = tag.RowsAffected()
	}
	tag, err := br.Exec()
	if err == nil && tag.String() != "COMMIT" {
		err = errors.New("the transaction was rolled back")
	}
	if err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return n, nil
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
func sqlTableTx(ctx context.Context, conn *sql.Conn, settingsSQL string, settings []any, scan func(rowScanner) error, query string, args []any) (int64, error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, settingsSQL, settings...); err != nil {
		return 0, fmt.Errorf("settings: %w", err)
	}
	var n int64
	if scan != nil {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return 0, err
		}
		err = scan(rows)
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = rows.Err()
		}
		if err != nil {
			return 0, err
		}
	} else {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return 0, err
		}
		n, _ = res.RowsAffected()
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return n, nil
}
