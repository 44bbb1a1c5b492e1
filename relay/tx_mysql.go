package relay

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// mysqlTx runs the relay's transactions on MySQL and MariaDB, each on a
// connection of its own: it sets the session's lock waits (from
// Config.LockTimeout, whole seconds, at least one) and the server's
// statement time limit (from Config.StatementTimeout) in one statement
// (MySQLServer's SessionLimits), then runs the statements
// in a READ COMMITTED transaction. Neither server has a per-transaction
// form of either setting, so they are the connection's, set again before
// every transaction. The client's deadline is a backstop: MySQL's limit
// bounds its SELECTs only, MariaDB's every statement.
//
// While the table is locked out (see lockout), a transaction that heeds
// it does not run: it fails with errLockedOut, as tableTx's do.
type mysqlTx struct {
	db      *sql.DB
	server  outboxsql.MySQLServerOnce // which server it is, read on the first connection
	timeout time.Duration             // Config.StatementTimeout
	lock    time.Duration             // Config.LockTimeout
	out     *lockout
}

// conn takes a connection from the pool with the session's settings set.
func (t *mysqlTx) conn(ctx context.Context) (*sql.Conn, error) {
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if err := t.session(ctx, conn, t.lock); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// session sets conn's lock waits to lock and its statement time limit,
// in one statement.
func (t *mysqlTx) session(ctx context.Context, conn *sql.Conn, lock time.Duration) error {
	server, err := t.server.Of(ctx, conn)
	if err != nil {
		return err
	}
	args := append(outboxsql.MySQLLockWaitsArgs{Wait: lock}.Args(), outboxsql.MySQLStatementTimeArgs{Server: server, Limit: t.timeout}.Args()...)
	// Inlined, the numbers go as text in one round trip, not as a
	// prepare, an execute and a close before every transaction.
	if _, err := outboxsql.MySQLExec(ctx, conn, server.SessionLimits(), args); err != nil {
		return fmt.Errorf("set the lock waits and statement time limit: %w", err)
	}
	return nil
}

// run runs fn in a READ COMMITTED transaction and commits it; heed: fail
// with errLockedOut without running while the table is locked out.
func (t *mysqlTx) run(ctx context.Context, heed bool, fn func(*sql.Tx) error) error {
	if heed && t.out != nil && t.out.locked() {
		return errLockedOut
	}
	ctx, cancel := context.WithTimeout(ctx, 2*t.timeout+t.lock)
	defer cancel()
	conn, err := t.conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// queryAll runs query in tx and reads the first column of its rows.
func queryAll[T any](ctx context.Context, tx *sql.Tx, query string, args ...any) ([]T, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return scanAll[T](rows)
}
