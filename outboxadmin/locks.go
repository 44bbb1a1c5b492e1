package outboxadmin

import (
	"context"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// Lock is a lock another session holds, or waits for, on the outbox table
// or its companions that the relays' statements wait behind (see Locks).
type Lock struct {
	PID int
	// Relation is the table, one of its partitions or a companion
	// (relays, shards, claim floor), as PostgreSQL names it.
	Relation string
	// Mode is PostgreSQL's lock mode: AccessExclusiveLock (ALTER TABLE,
	// VACUUM FULL, TRUNCATE, LOCK TABLE), ShareLock (CREATE INDEX), ...
	Mode string
	// Granted is whether the session holds the lock; one still waiting
	// for it holds the relays back as well, queued behind it.
	Granted bool
	// Application and State are the session's application_name and state
	// (active, idle in transaction, ...).
	Application, State string
	// For is how long the session has held the lock (its transaction's
	// age) or waited for it.
	For time.Duration
	// Query is the session's current or last statement, its first 200
	// characters.
	Query string
}

// Locks lists the sessions that hold or wait for a lock on the table (any
// partition) or its companions that the relays' statements wait behind,
// SHARE mode or stronger, the longest held first. While one lasts past
// their relay.Config.LockTimeout, the relays lock the table out (see
// relay.Health.Locked) and publish nothing from it. It reads pg_locks and
// pg_stat_activity only, so it answers while the tables are locked; a
// role without pg_read_all_stats sees other roles' queries as
// "<insufficient privilege>". On MySQL it returns an error matching
// errors.ErrUnsupported: the servers' views of the tables' metadata locks
// differ, and neither is there by default on both.
func (a *Admin) Locks(ctx context.Context) ([]Lock, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	out, err := a.db.locks(ctx)
	if err != nil {
		return nil, fmt.Errorf("outboxadmin: read locks: %w", err)
	}
	return out, nil
}

// IsLockTimeout reports whether err is a statement's that gave up on a
// lock another session holds (SQLSTATE 55P03, lock_not_available; on
// MySQL error 1205, ER_LOCK_WAIT_TIMEOUT, or 3572, ER_LOCK_NOWAIT): the
// table is locked, and Locks says by whom (on PostgreSQL).
func IsLockTimeout(err error) bool {
	if outboxsql.IsLockNotAvailable(err) {
		return true
	}
	n := outboxsql.MySQLErrorNumber(err)
	return n == mysqlLockWaitTimeout || n == mysqlLockNowait
}

// MySQL's error numbers for a lock given up on (see IsLockTimeout).
const (
	mysqlLockWaitTimeout = 1205
	mysqlLockNowait      = 3572
)
