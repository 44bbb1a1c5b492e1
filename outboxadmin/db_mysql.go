package outboxadmin

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// mysqlAdminDB is an Admin's database on MySQL and MariaDB: the statements
// of internal/outboxsql/mysql_ops.go. Each operation runs on a connection
// of the pool after one statement sets the session's statement time limit
// to Config.StatementTimeout (MySQL's max_execution_time bounds its
// SELECTs, MariaDB's max_statement_time every statement, lock waits
// included), so a statement the caller's context gives up on does not
// run on in the server; operator transactions are READ COMMITTED and set
// their lock waits and idle limit too (MySQLOpsTimeouts). The connection
// goes back to the pool with those set back (release). Lists of ids and
// aggregates are bound one placeholder each, outboxsql.MySQLOpsMaxIDs per
// statement at most.
//
// What MySQL has not: no per-topic figures (topicStats), no view of who
// holds a lock on the tables (locks), no WAL relay (no slot, nothing
// streams the table), no NOTIFY (wake does nothing: relays poll), no
// prune lock (MySQLOpsReplayLock stands in for it).
type mysqlAdminDB struct {
	db      *sql.DB
	names   outboxsql.Names
	timeout time.Duration             // Config.StatementTimeout
	server  outboxsql.MySQLServerOnce // which server it is, read on the first connection
	sql     mysqlStatements
}

// mysqlStatements are the MySQL operator statements of one form, rendered
// for the table once; those bound to a list are built for its length.
type mysqlStatements struct {
	row, claimGate, lowerFloor, replaySelect, lookupEventID string
	lookupAggregate, counts, lag, relays, shards, handovers string
}

var _ adminDB = (*mysqlAdminDB)(nil)

func newMySQLAdminDB(db *sql.DB, names outboxsql.Names, timeout time.Duration) *mysqlAdminDB {
	return &mysqlAdminDB{db: db, names: names, timeout: timeout, sql: mysqlStatements{
		row:             names.Render(outboxsql.MySQLOpsRow),
		claimGate:       names.Render(outboxsql.MySQLOpsClaimGate),
		lowerFloor:      names.Render(outboxsql.MySQLOpsLowerFloor),
		replaySelect:    names.Render(outboxsql.MySQLOpsReplaySelect),
		lookupEventID:   names.Render(outboxsql.MySQLOpsLookupEventID),
		lookupAggregate: names.Render(outboxsql.MySQLOpsLookupAggregate),
		counts:          names.Render(outboxsql.MySQLOpsCounts),
		lag:             names.Render(outboxsql.MySQLOpsLag),
		relays:          names.Render(outboxsql.MySQLOpsRelays),
		shards:          names.Render(outboxsql.MySQLOpsShards),
		handovers:       names.Render(outboxsql.MySQLOpsHandovers),
	}}
}

// errNoTopicStats is topicStats' answer on MySQL.
var errNoTopicStats = fmt.Errorf("%w on MySQL/MariaDB: the schema has no index of the dead events by topic (see docs/mysql.md)", errors.ErrUnsupported)

// conn takes a connection from the pool with the session's statement time
// limit set. The caller closes it.
func (m *mysqlAdminDB) conn(ctx context.Context) (*sql.Conn, error) {
	conn, err := m.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	server, err := m.server.Of(ctx, conn)
	if err == nil {
		// Inlined: the numbers go as text in one round trip, not as a
		// prepare, an execute and a close before every operation.
		_, err = outboxsql.MySQLExec(ctx, conn, server.StatementTime(), outboxsql.MySQLStatementTimeArgs{Server: server, Limit: m.timeout}.Args())
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("set the statement time limit: %w", err)
	}
	return conn, nil
}

// withConn runs fn on a connection with the session's limits (conn), and
// gives the connection back to the pool with them set back (release).
func (m *mysqlAdminDB) withConn(ctx context.Context, fn func(*sql.Conn) error) error {
	conn, err := m.conn(ctx)
	if err != nil {
		return err
	}
	defer m.release(ctx, conn)
	return fn(conn)
}

// release sets the session's limits back to the server's defaults
// (MySQLOpsSessionReset) and gives conn back to the pool, which the
// application may share; a connection it cannot set back is closed.
func (m *mysqlAdminDB) release(ctx context.Context, conn *sql.Conn) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.timeout)
	defer cancel()
	server, err := m.server.Of(rctx, conn) // read by conn already
	if err == nil {
		_, err = conn.ExecContext(rctx, outboxsql.MySQLOpsSessionReset(server))
	}
	if err != nil {
		// database/sql closes a connection whose Raw returns ErrBadConn.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	conn.Close()
}

// stats is Snapshot's totals: the same fields as txoutbox.ReadStats, no
// per-topic figures.
func (m *mysqlAdminDB) stats(ctx context.Context) (txoutbox.Stats, error) {
	c, err := m.counts(ctx)
	if err != nil {
		return txoutbox.Stats{}, err
	}
	return c.snapshot().Stats, nil
}

func (m *mysqlAdminDB) topicStats(context.Context) ([]txoutbox.TopicStats, error) {
	return nil, errNoTopicStats
}

func (m *mysqlAdminDB) counts(ctx context.Context) (counts, error) {
	var (
		c                            counts
		oldest, next, clock, dueTime outboxsql.MySQLTime
	)
	err := m.withConn(ctx, func(conn *sql.Conn) error {
		args := outboxsql.MySQLCountArgs{Cap: txoutbox.StatsExactMax, Counts: 3}.Args()
		return conn.QueryRowContext(ctx, m.sql.counts, args...).Scan(&c.unpublished, &c.dead, &c.scheduled, &oldest, &next, &c.lastID, &clock, &dueTime)
	})
	c.oldest, c.next, c.due, c.at = nullTime(oldest), nullTime(next), nullTime(dueTime), clock.Time
	return c, err
}

// nullTime is t as a sql.NullTime.
func nullTime(t outboxsql.MySQLTime) sql.NullTime { return sql.NullTime{Time: t.Time, Valid: t.Valid} }

func (m *mysqlAdminDB) lag(ctx context.Context) (sql.NullTime, time.Time, error) {
	var oldest, clock outboxsql.MySQLTime
	err := m.withConn(ctx, func(conn *sql.Conn) error {
		return conn.QueryRowContext(ctx, m.sql.lag).Scan(&oldest, &clock)
	})
	return nullTime(oldest), clock.Time, err
}

func (m *mysqlAdminDB) relays(ctx context.Context) ([]RelayStatus, error) {
	var out []RelayStatus
	err := m.withConn(ctx, func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, m.sql.relays)
		out, err = collect(rows, err, scanRelay)
		return err
	})
	return out, err
}

func (m *mysqlAdminDB) shards(ctx context.Context) ([]shardOwner, error) {
	var out []shardOwner
	err := m.withConn(ctx, func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, m.sql.shards)
		out, err = collect(rows, err, scanShard)
		return err
	})
	return out, err
}

func (m *mysqlAdminDB) handovers(ctx context.Context) ([]int, error) {
	var out []int
	err := m.withConn(ctx, func(conn *sql.Conn) error {
		args := outboxsql.MySQLHandoversArgs{Window: outboxsql.OpsHandoverWindow}.Args()
		rows, err := conn.QueryContext(ctx, m.sql.handovers, args...)
		out, err = collect(rows, err, scanInt)
		return err
	})
	return out, err
}

// slot is nil: there is no WAL relay on MySQL.
func (m *mysqlAdminDB) slot(context.Context) (*SlotStatus, error) { return nil, nil }

// walSlots is "": no WAL relay streams a MySQL table.
func (m *mysqlAdminDB) walSlots(context.Context) (string, error) { return "", nil }

func (m *mysqlAdminDB) row(ctx context.Context, id int64) (Row, error) {
	var (
		r       Row
		payload []byte
	)
	err := m.withConn(ctx, func(conn *sql.Conn) (err error) {
		r, err = scanRow(conn.QueryRowContext(ctx, m.sql.row, outboxsql.MySQLOpsRowArgs{ID: id}.Args()...), &payload)
		return err
	})
	if err != nil {
		return Row{}, err
	}
	r.Payload = payload
	return r, nil
}

// deadList reads each chunk of f's ids' page, and keeps the first limit
// rows of them all in id order.
func (m *mysqlAdminDB) deadList(ctx context.Context, f outboxsql.DeadArgs, after int64, limit int) ([]Row, error) {
	var out []Row
	err := m.withConn(ctx, func(conn *sql.Conn) error {
		for _, part := range deadChunks(f) {
			rows, err := queryRows(ctx, conn, outboxsql.MySQLOpsDeadList(m.names, part.Filters(), len(part.IDs)),
				outboxsql.MySQLDeadListArgs{DeadArgs: part, After: after, Limit: limit}.Args()...)
			if err != nil {
				return err
			}
			out = append(out, rows...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sortByID(out)
	return out[:min(len(out), limit)], nil
}

func (m *mysqlAdminDB) deadCount(ctx context.Context, f outboxsql.DeadArgs, limit int) (int64, error) {
	var total int64
	err := m.withConn(ctx, func(conn *sql.Conn) error {
		for _, part := range deadChunks(f) {
			var n int64
			err := conn.QueryRowContext(ctx, outboxsql.MySQLOpsDeadCount(m.names, part.Filters(), len(part.IDs)),
				outboxsql.MySQLDeadCountArgs{DeadArgs: part, Cap: limit}.Args()...).Scan(&n)
			if err != nil {
				return err
			}
			if total += n; total >= int64(limit) {
				break
			}
		}
		return nil
	})
	return min(total, int64(limit)), err
}

// deadChunks is f with its ids cut into lists of MySQLOpsMaxIDs at most:
// f itself when it has that many or fewer (none too). The ids are sorted
// and each kept once first, so that no row is in two lists.
func deadChunks(f outboxsql.DeadArgs) []outboxsql.DeadArgs {
	if len(f.IDs) <= outboxsql.MySQLOpsMaxIDs {
		return []outboxsql.DeadArgs{f}
	}
	ids := slices.Compact(slices.Sorted(slices.Values(f.IDs)))
	var out []outboxsql.DeadArgs
	for part := range slices.Chunk(ids, outboxsql.MySQLOpsMaxIDs) {
		g := f
		g.IDs = part
		out = append(out, g)
	}
	return out
}

// sortByID sorts rows by id: each chunk's are in id order, not all.
func sortByID(rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int { return cmp.Compare(a.ID, b.ID) })
}

// lookup reads the rows of an event id or an aggregate, of any age: the
// MySQL schema's event and aggregate indexes cover published rows too, so
// Config.LookupWindow does not apply.
func (m *mysqlAdminDB) lookup(ctx context.Context, q lookupQuery) ([]Row, error) {
	query, args := m.sql.lookupEventID, outboxsql.MySQLLookupArgs{Key: q.eventID, Limit: q.limit}
	if q.eventID == "" {
		query, args = m.sql.lookupAggregate, outboxsql.MySQLLookupArgs{Aggregate: true, Key: q.aggregate, Limit: q.limit}
	}
	var out []Row
	err := m.withConn(ctx, func(conn *sql.Conn) (err error) {
		out, err = queryRows(ctx, conn, query, args.Args()...)
		return err
	})
	return out, err
}

func (m *mysqlAdminDB) replaySelect(ctx context.Context, f ReplayFilter) ([]replayRow, error) {
	var out []replayRow
	err := m.withConn(ctx, func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, m.sql.replaySelect,
			outboxsql.MySQLReplaySelectArgs{Since: f.Since, Topic: f.Topic, Aggregate: f.AggregateID}.Args()...)
		out, err = collect(rows, err, scanReplaySelected)
		return err
	})
	return out, err
}

// locks is unsupported: MySQL's and MariaDB's views of metadata locks
// differ (performance_schema.metadata_locks, a plugin's
// information_schema.METADATA_LOCK_INFO), and neither is there by default
// on both.
func (m *mysqlAdminDB) locks(context.Context) ([]Lock, error) {
	return nil, fmt.Errorf("%w on MySQL/MariaDB: it has no view of the table locks held common to both servers (see docs/mysql.md)", errors.ErrUnsupported)
}

// inTx runs fn in a READ COMMITTED transaction on a connection with the
// session's statement time limit, after MySQLOpsTimeouts: a lock wait
// longer than timeout fails (error 1205), and so does the session left
// idle longer. Under READ COMMITTED the locking reads take no gap locks,
// and InnoDB releases at once the rows they read and do not return. A
// deadlock's victim runs again (retryVictim).
func (m *mysqlAdminDB) inTx(ctx context.Context, timeout time.Duration, commit bool, fn func(opTx) error) error {
	return retryVictim(ctx, func() error {
		return m.withConn(ctx, func(conn *sql.Conn) error {
			if _, err := outboxsql.MySQLExec(ctx, conn, outboxsql.MySQLOpsTimeouts, outboxsql.MySQLOpsTimeoutsArgs{Timeout: timeout}.Args()); err != nil {
				return fmt.Errorf("set timeouts: %w", err)
			}
			return runTx(ctx, conn, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, commit, func(tx *sql.Tx) error {
				return fn(&mysqlOpTx{tx: tx, m: m})
			})
		})
	})
}

// mysqlOpTx is an operator transaction on MySQL: each list is bound one
// placeholder per value, in statements of MySQLOpsMaxIDs values at most.
type mysqlOpTx struct {
	tx *sql.Tx
	m  *mysqlAdminDB
}

var _ opTx = (*mysqlOpTx)(nil)

// walSlots is "": no WAL relay streams a MySQL table, and there is no WAL
// gate to take.
func (t *mysqlOpTx) walSlots(context.Context) (string, error) { return "", nil }

func (t *mysqlOpTx) lockDead(ctx context.Context, f outboxsql.DeadArgs) ([]Row, error) {
	var out []Row
	for _, part := range deadChunks(f) {
		rows, err := queryRows(ctx, t.tx, outboxsql.MySQLOpsDeadLock(t.m.names, part.Filters(), len(part.IDs)),
			outboxsql.MySQLDeadArgs{DeadArgs: part}.Args()...)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	sortByID(out)
	return out, nil
}

// claimGate takes the claim floor's row FOR UPDATE (MySQLOpsClaimGate):
// without the row, it holds nothing and fails.
func (t *mysqlOpTx) claimGate(ctx context.Context) error {
	var floor int64
	err := t.tx.QueryRowContext(ctx, t.m.sql.claimGate).Scan(&floor)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("the claim floor %s has no row: run the migrations (outbox migrate up)", t.m.names.Floor)
	}
	return err
}

func (t *mysqlOpTx) lockUnpublished(ctx context.Context, aggregates []string) (map[string][]int64, error) {
	var locked []lockedRow
	for part := range slices.Chunk(aggregates, outboxsql.MySQLOpsMaxIDs) {
		rows, err := t.tx.QueryContext(ctx, outboxsql.MySQLOpsLockUnpublished(t.m.names, len(part)), outboxsql.MySQLIDsArgs[string]{IDs: part}.Args()...)
		got, err := collect(rows, err, scanLocked)
		if err != nil {
			return nil, err
		}
		locked = append(locked, got...)
	}
	return claimedByAggregate(locked), nil
}

// execChunks runs build's statement for each chunk of ids and returns the
// rows they changed.
func (t *mysqlOpTx) execChunks(ctx context.Context, ids []int64, build func(outboxsql.Names, int) string) (int64, error) {
	var n int64
	for part := range slices.Chunk(ids, outboxsql.MySQLOpsMaxIDs) {
		k, err := affected(t.tx.ExecContext(ctx, build(t.m.names, len(part)), outboxsql.MySQLIDsArgs[int64]{IDs: part}.Args()...))
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

func (t *mysqlOpTx) retry(ctx context.Context, ids []int64) (int64, error) {
	return t.execChunks(ctx, ids, outboxsql.MySQLOpsRetry)
}

func (t *mysqlOpTx) drop(ctx context.Context, ids []int64) (int64, error) {
	return t.execChunks(ctx, ids, outboxsql.MySQLOpsDrop)
}

// pruneLock takes nothing: replay's locking read of the rows it returns to
// pending (MySQLOpsReplayLock) holds a prune's DELETE of them back, and
// the prune then finds them no longer published.
func (t *mysqlOpTx) pruneLock(context.Context) error { return nil }

// replay locks the rows of ids still published (MySQLOpsReplayLock: what
// RETURNING gives on PostgreSQL), then returns them to pending
// (MySQLOpsReplay). The rows are locked, so each of them changes.
func (t *mysqlOpTx) replay(ctx context.Context, ids []int64) ([]replayRow, error) {
	var locked []replayRow
	for part := range slices.Chunk(ids, outboxsql.MySQLOpsMaxIDs) {
		rows, err := t.tx.QueryContext(ctx, outboxsql.MySQLOpsReplayLock(t.m.names, len(part)), outboxsql.MySQLIDsArgs[int64]{IDs: part}.Args()...)
		got, err := collect(rows, err, scanReplayed)
		if err != nil {
			return nil, err
		}
		locked = append(locked, got...)
	}
	lockedIDs := make([]int64, len(locked))
	for i, r := range locked {
		lockedIDs[i] = r.id
	}
	n, err := t.execChunks(ctx, lockedIDs, outboxsql.MySQLOpsReplay)
	if err != nil {
		return nil, err
	}
	if n != int64(len(locked)) {
		// The rows are locked: only a bug gets here.
		return nil, fmt.Errorf("%d of the %d rows locked returned to pending", n, len(locked))
	}
	return locked, nil
}

func (t *mysqlOpTx) lowerFloor(ctx context.Context, ids []int64) error {
	_, err := t.tx.ExecContext(ctx, t.m.sql.lowerFloor, outboxsql.MySQLLowerFloorArgs{IDs: ids}.Args()...)
	return err
}

// wake does nothing: there is no NOTIFY on MySQL, and relays poll.
func (t *mysqlOpTx) wake(context.Context) error { return nil }
