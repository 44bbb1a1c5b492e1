package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox/internal/grants"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/migrations"
)

// mysqlSchemaVersion is the MySQL outbox schema version a relay needs: the
// newest of its release's MySQL series.
var mysqlSchemaVersion = migrations.Outbox.MySQLLatest()

// MySQL's error numbers for a lock given up on: ER_LOCK_WAIT_TIMEOUT (a
// row lock past innodb_lock_wait_timeout, or a metadata lock past
// lock_wait_timeout; MariaDB's NOWAIT too) and MySQL's ER_LOCK_NOWAIT.
// A statement out of its time limit is another error (MariaDB's 1969,
// MySQL's 3024).
const (
	mysqlLockWaitTimeout = 1205
	mysqlLockNowait      = 3572
)

// mysqlTableDB is the table as a whole on MySQL and MariaDB: the
// lockout's probe (MySQLLockProbe and MySQLLockProbeGate), errors 1205
// and 3572 for a lock given up on, and the schema check through
// migrations.Migrator with the refusals of what the relay cannot run on
// (a partitioned outbox, a server whose commits are not durable), and
// the grants read from information_schema (grants.CheckMySQL).
type mysqlTableDB struct {
	tx     *mysqlTx
	names  outboxsql.Names
	table  string // the outbox's unquoted name
	schema *migrations.Migrator
}

var _ tableDB = (*mysqlTableDB)(nil)

// probe runs MySQLLockProbe, then MySQLLockProbeGate, in a transaction it
// rolls back, with the shortest lock waits the servers accept (a second).
func (m *mysqlTableDB) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.tx.timeout+time.Second)
	defer cancel()
	conn, err := m.tx.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := m.tx.session(ctx, conn, time.Second); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a probe changes nothing
	for _, q := range outboxsql.MySQLLockProbe {
		rows, err := tx.QueryContext(ctx, m.names.Render(q))
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		if err := rows.Close(); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
	}
	var floor int64
	err = tx.QueryRowContext(ctx, m.names.Render(outboxsql.MySQLLockProbeGate)).Scan(&floor)
	switch {
	case m.lockWait(err):
		return errGateHeld
	case err != nil && !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("probe the gate: %w", err)
	}
	return nil
}

// lockWait reports whether err is error 1205 or 3572.
func (m *mysqlTableDB) lockWait(err error) bool {
	n := outboxsql.MySQLErrorNumber(err)
	return n == mysqlLockWaitTimeout || n == mysqlLockNowait
}

// checkSchema checks the table's schema version, then refuses, with an
// error matching ErrInvalidConfig, a partitioned outbox and a server
// whose commits are not durable (checkDurable).
func (m *mysqlTableDB) checkSchema(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.tx.timeout)
	defer cancel()
	if err := m.schema.Check(ctx, mysqlSchemaVersion); err != nil {
		return err
	}
	var parts int
	if err := m.tx.db.QueryRowContext(ctx, outboxsql.MySQLPartitioned, m.table).Scan(&parts); err != nil {
		return fmt.Errorf("read the outbox's partitions: %w", err)
	}
	if parts > 0 {
		return fmt.Errorf("%w: %s is partitioned (%d partitions): the relay does not run on a partitioned outbox on MySQL (see docs/mysql.md)",
			ErrInvalidConfig, m.names.Table, parts)
	}
	var flush string
	if err := m.tx.db.QueryRowContext(ctx, outboxsql.MySQLFlushLogAtTrxCommit).Scan(&flush); err != nil {
		return fmt.Errorf("read innodb_flush_log_at_trx_commit: %w", err)
	}
	return checkDurable(flush)
}

// checkDurable refuses a server whose innodb_flush_log_at_trx_commit is
// not 1. With 0 or 2 InnoDB answers commits before its log is on disk, the
// claim's too: a crash may roll back a writer's commit whose event the
// relay already published, and nothing the relay does can make that
// commit durable. With 1, a claim's commit flushes the log up to its own
// commit record, past the commits of the rows it leased, before the relay
// publishes them, as a claim's durable commit does on PostgreSQL. (With
// the binary log on, sync_binlog = 1 is needed too against an operating
// system crash; a mysqld crash loses nothing the OS has: docs/mysql.md.)
func checkDurable(flush string) error {
	if flush == "1" {
		return nil
	}
	return fmt.Errorf("%w: the server's innodb_flush_log_at_trx_commit is %s: the relay needs 1, so that no event it publishes can be rolled back by a crash "+
		"(SET GLOBAL innodb_flush_log_at_trx_commit = 1; see docs/mysql.md)", ErrInvalidConfig, flush)
}

// checkGrants reads the account's privileges on the outbox tables from
// information_schema (grants.CheckMySQL), bounded by StatementTimeout.
func (m *mysqlTableDB) checkGrants(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.tx.timeout)
	defer cancel()
	return grants.CheckMySQL(ctx, m.tx.db, "the relay", grants.Relay(m.names))
}
