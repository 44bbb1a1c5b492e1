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

// mysqlVersionSQL is versionSQL for MySQL's names.
func mysqlVersionSQL(names outboxsql.Names) versionSQL {
	return versionSQL{
		create: names.Render(outboxsql.MySQLVersionTable),
		read:   names.Render(outboxsql.MySQLVersionsRead),
		record: names.Render(outboxsql.MySQLVersionRecord),
		forget: names.Render(outboxsql.MySQLVersionForget),
	}
}

// inMySQLLock runs fn on a connection of its own holding the set's named
// lock, and releases the lock after.
// GET_LOCK belongs to the session, so the lock, the reads and the DDL all
// run on that one connection.
func (m *Migrator) inMySQLLock(ctx context.Context, fn func(querier) error) error {
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
	return fn(conn)
}

// checkMySQL is Check on MySQL: the version table read as it is, nothing
// created.
func (m *Migrator) checkMySQL(ctx context.Context, need int) error {
	current, err := m.applied(ctx, m.db)
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
