package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// mysqlLockWait is how long one GET_LOCK waits before the migrator checks
// its context and asks again: GET_LOCK does not end when the client goes
// away, so a wait is kept short rather than left to the context.
const mysqlLockWait = 5 * time.Second

// mysqlNoSuchTable is MySQL's and MariaDB's ER_NO_SUCH_TABLE.
const mysqlNoSuchTable = 1146

// rename is the migration SQL with the set's tables renamed for m.
func (m *Migrator) rename(sql string) string {
	if m.dialect == outboxsql.MySQL {
		return m.set.renameQuoted(sql, m.table, outboxsql.MySQLQuote)
	}
	return m.set.rename(sql, m.table)
}

// upMySQL is Up on MySQL: each migration's statements one by one, then its
// version recorded.
func (m *Migrator) upMySQL(ctx context.Context) ([]int, error) {
	var applied []int
	err := m.inMySQLLock(ctx, func(conn *sql.Conn, current map[int]appliedVersion) error {
		if err := m.refuseUnknown(current); err != nil {
			return err
		}
		for _, mig := range m.migrations {
			if _, ok := current[mig.Version]; ok {
				continue
			}
			if err := m.execScript(ctx, conn, mig.up); err != nil {
				return fmt.Errorf("apply %04d_%s: %w", mig.Version, mig.Name, err)
			}
			if _, err := conn.ExecContext(ctx, outboxsql.MySQLRender(m.names, outboxsql.MySQLVersionRecord), mig.Version, mig.Name); err != nil {
				return fmt.Errorf("record %04d_%s: %w", mig.Version, mig.Name, err)
			}
			applied = append(applied, mig.Version)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrations: up: %w", err)
	}
	return applied, nil
}

// downMySQL is Down on MySQL.
func (m *Migrator) downMySQL(ctx context.Context) (int, error) {
	reverted := 0
	err := m.inMySQLLock(ctx, func(conn *sql.Conn, current map[int]appliedVersion) error {
		if err := m.refuseUnknown(current); err != nil {
			return err
		}
		for i := len(m.migrations) - 1; i >= 0; i-- {
			mig := m.migrations[i]
			if _, ok := current[mig.Version]; !ok {
				continue
			}
			if err := m.execScript(ctx, conn, mig.down); err != nil {
				return fmt.Errorf("revert %04d_%s: %w", mig.Version, mig.Name, err)
			}
			if _, err := conn.ExecContext(ctx, outboxsql.MySQLRender(m.names, outboxsql.MySQLVersionForget), mig.Version); err != nil {
				return fmt.Errorf("unrecord %04d_%s: %w", mig.Version, mig.Name, err)
			}
			reverted = mig.Version
			return nil
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("migrations: down: %w", err)
	}
	return reverted, nil
}

// execScript runs a migration's statements one by one: MySQL's drivers
// take one per call unless the DSN has multiStatements=true.
func (m *Migrator) execScript(ctx context.Context, conn *sql.Conn, script string) error {
	for _, stmt := range outboxsql.SplitStatements(m.rename(script)) {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// inMySQLLock runs fn on a connection of its own holding the set's named
// lock, with the version table in place, and releases the lock after.
// GET_LOCK belongs to the session, so the lock, the reads and the DDL all
// run on that one connection.
func (m *Migrator) inMySQLLock(ctx context.Context, fn func(*sql.Conn, map[int]appliedVersion) error) error {
	conn, err := m.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	args := outboxsql.MySQLMigrateLockArgs{Table: m.table, Timeout: mysqlLockWait}
	for {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, outboxsql.MySQLMigrateLock, args.Args()...).Scan(&got); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		if got.Valid && got.Int64 == 1 {
			break
		}
		if !got.Valid {
			return errors.New("take migration lock: GET_LOCK returned NULL (an error on the server)")
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("take migration lock: another migrator of %s holds it: %w", m.tableName, err)
		}
	}
	defer func() {
		// A fresh context: release even when ctx has ended. Closing the
		// connection would release it too, but the pool may keep it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = conn.ExecContext(rctx, outboxsql.MySQLMigrateUnlock, m.table)
	}()
	if _, err := conn.ExecContext(ctx, outboxsql.MySQLRender(m.names, outboxsql.MySQLVersionTable)); err != nil {
		return fmt.Errorf("create version table: %w", err)
	}
	current, err := m.appliedMySQL(ctx, conn)
	if err != nil {
		return err
	}
	return fn(conn, current)
}

// appliedMySQL reads the version table through q.
func (m *Migrator) appliedMySQL(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) (map[int]appliedVersion, error) {
	rows, err := q.QueryContext(ctx, outboxsql.MySQLRender(m.names, outboxsql.MySQLVersionsRead))
	if err != nil {
		return nil, fmt.Errorf("read applied versions: %w", err)
	}
	defer rows.Close()
	out := map[int]appliedVersion{}
	for rows.Next() {
		var v int
		var a appliedVersion
		var at outboxsql.MySQLTime
		if err := rows.Scan(&v, &a.name, &at); err != nil {
			return nil, fmt.Errorf("read applied versions: %w", err)
		}
		a.at = at.Time
		out[v] = a
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read applied versions: %w", err)
	}
	return out, nil
}

// checkMySQL is Check on MySQL: the version table read as it is, nothing
// created.
func (m *Migrator) checkMySQL(ctx context.Context, need int) error {
	current, err := m.appliedMySQL(ctx, m.db)
	if outboxsql.MySQLErrorNumber(err) == mysqlNoSuchTable {
		if need == 0 {
			return nil
		}
		return fmt.Errorf("%w: %s has no version table (version %d is needed): run %s", ErrSchemaTooOld, m.tableName, need, m.upCommand())
	}
	if err != nil {
		return fmt.Errorf("migrations: check: %w", err)
	}
	return m.checkApplied(current, need)
}
