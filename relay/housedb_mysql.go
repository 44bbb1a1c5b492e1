package relay

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// mysqlHouseDB is the housekeeping loops' database on MySQL and MariaDB:
// MySQLPruneBatch and MySQLPrune, and the stats readings
// (internal/outboxsql/mysql_members.go). The rest answers that there is
// nothing to do: the MySQL outbox cannot be partitioned (New refuses
// one); its writers cannot leave a row due by one column and read by
// another (there is no next_attempt_at: see mysql_members.go), so there
// is nothing to repair; and its claim floor is never raised, so its floor
// proofs are idle. The claim reads first attempts on outbox_lane_idx,
// whose lane leaves the published rows out, so it needs no floor to skip
// them.
type mysqlHouseDB struct {
	tx    *mysqlTx
	names outboxsql.Names
}

var (
	_ pruneDB  = (*mysqlHouseDB)(nil)
	_ statsDB  = (*mysqlHouseDB)(nil)
	_ repairDB = (*mysqlHouseDB)(nil)
	_ floorDB  = (*mysqlHouseDB)(nil)
)

// pruneState answers the zero pruneState: the rows are pruned from the
// table.
func (m *mysqlHouseDB) pruneState(context.Context) (pruneState, error) { return pruneState{}, nil }

// maintainPartitions is never called on a table that is not partitioned;
// it answers that another relay is at it.
func (m *mysqlHouseDB) maintainPartitions(context.Context, partitionParams) (partitionRound, error) {
	return partitionRound{}, nil
}

// pruneBatch runs MySQLPruneBatch and MySQLPrune in one transaction.
// There is no prune lock (see MySQLPrune): two relays pruning at once
// delete each row once, and locked is always true.
func (m *mysqlHouseDB) pruneBatch(ctx context.Context, pp pruneParams) (deleted int64, locked bool, err error) {
	if pp.partition != "" {
		return 0, true, fmt.Errorf("prune partition %s: the MySQL outbox has no partitions", pp.partition)
	}
	err = m.tx.run(ctx, false, func(tx *sql.Tx) error {
		ids, err := queryAll[int64](ctx, tx, m.names.Render(outboxsql.MySQLPruneBatch),
			outboxsql.MySQLPruneArgs{Retention: pp.retention, Batch: pp.batch}.Args()...)
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if len(ids) == 0 {
			return nil
		}
		args := outboxsql.MySQLPruneDeleteArgs{IDs: ids, Retention: pp.retention}
		res, err := tx.ExecContext(ctx, outboxsql.MySQLPrune(m.names, len(ids)), args.Args()...)
		if err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		deleted, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, true, err
	}
	return deleted, true, nil
}

// statsConn holds a connection with the session's settings.
func (m *mysqlHouseDB) statsConn(ctx context.Context) (statsConn, error) {
	if m.tx.out != nil && m.tx.out.locked() {
		return nil, errLockedOut
	}
	conn, err := m.tx.conn(ctx)
	if err != nil {
		return nil, err
	}
	return &mysqlStatsConn{db: m, conn: conn}, nil
}

// mysqlStatsConn runs the stats readings on conn, each a statement of its
// own.
type mysqlStatsConn struct {
	db   *mysqlHouseDB
	conn *sql.Conn
}

func (c *mysqlStatsConn) query(ctx context.Context, query string, args []any, dest ...any) error {
	if c.db.tx.out != nil && c.db.tx.out.locked() {
		return errLockedOut
	}
	return c.conn.QueryRowContext(ctx, c.db.names.Render(query), args...).Scan(dest...)
}

// lag runs MySQLStatsLags, which takes no cap (see mysqlOldestDue).
func (c *mysqlStatsConn) lag(ctx context.Context, _ int) (statsLag, error) {
	var (
		l                  statsLag
		oldest, due, clock outboxsql.MySQLTime
	)
	if err := c.query(ctx, outboxsql.MySQLStatsLags, nil, &oldest, &due, &clock); err != nil {
		return statsLag{}, err
	}
	l.oldest = sql.NullTime{Time: oldest.Time, Valid: oldest.Valid}
	l.due = sql.NullTime{Time: due.Time, Valid: due.Valid}
	l.now = clock.Time
	return l, nil
}

// backlog runs MySQLStatsBacklogScheduled.
func (c *mysqlStatsConn) backlog(ctx context.Context, limit int) (unpublished, scheduled int64, err error) {
	err = c.query(ctx, outboxsql.MySQLStatsBacklogScheduled, outboxsql.MySQLCountArgs{Cap: limit, Counts: 2}.Args(), &unpublished, &scheduled)
	return unpublished, scheduled, err
}

// dead runs MySQLStatsDead.
func (c *mysqlStatsConn) dead(ctx context.Context, limit int) (int64, error) {
	var n int64
	err := c.query(ctx, outboxsql.MySQLStatsDead, outboxsql.MySQLCountArgs{Cap: limit, Counts: 1}.Args(), &n)
	return n, err
}

func (c *mysqlStatsConn) close() { c.conn.Close() }

// repair returns none: MySQL's writers leave no rows to repair.
func (m *mysqlHouseDB) repair(context.Context, repairParams) ([]repairedRow, error) { return nil, nil }

// floorStart returns an idle proof: the MySQL claim floor is not raised.
func (m *mysqlHouseDB) floorStart(context.Context) (floorProof, error) {
	return floorProof{idle: true}, nil
}

// floorPassed is never asked of an idle proof.
func (m *mysqlHouseDB) floorPassed(context.Context, floorProof) (bool, error) { return false, nil }

// floorRaise raises nothing.
func (m *mysqlHouseDB) floorRaise(context.Context, floorProof) (int64, bool, error) {
	return 0, false, nil
}

// floorRead reads nothing: the claims need no Low on one table.
func (m *mysqlHouseDB) floorRead(context.Context) (int64, error) { return 0, nil }

// claimRanges lists none: one table.
func (m *mysqlHouseDB) claimRanges(context.Context) ([]idRange, error) { return nil, nil }

// firstUnpublished is never asked without partitions.
func (m *mysqlHouseDB) firstUnpublished(context.Context, []idRange) (int64, bool, error) {
	return 0, false, nil
}
