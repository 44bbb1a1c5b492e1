package relay

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/partitions"
)

// pgHouseDB is the housekeeping loops' database on PostgreSQL: Prune with
// the prune locks and the partitions' maintenance, the stats readings,
// RepairRetryAt, and the claim floor's statements with ClaimLow. A floor
// proof's database part is its outboxsql.ClaimFloorProof.
type pgHouseDB struct {
	db      *sql.DB
	tx      *tableTx // runs the statements on the table and its floor
	sql     *statements
	table   partitions.Table // names its partitions
	timeout time.Duration    // Config.StatementTimeout
	lock    time.Duration    // Config.LockTimeout
}

var (
	_ pruneDB  = (*pgHouseDB)(nil)
	_ statsDB  = (*pgHouseDB)(nil)
	_ repairDB = (*pgHouseDB)(nil)
	_ floorDB  = (*pgHouseDB)(nil)
)

func newPGHouseDB(db *sql.DB, tx *tableTx, q *statements, table partitions.Table, cfg Config) *pgHouseDB {
	return &pgHouseDB{db: db, tx: tx, sql: q, table: table, timeout: cfg.StatementTimeout, lock: cfg.LockTimeout}
}

// pruneState reads partitions.ReadState's statement under the relay's
// lock timeout: it reads the table.
func (p *pgHouseDB) pruneState(ctx context.Context) (pruneState, error) {
	var st pruneState
	if err := p.tx.query(ctx, scanRow(&st.partitioned, &st.owner, &st.maxID, &st.floor), p.sql.names.Render(outboxsql.PartitionState)); err != nil {
		return pruneState{}, fmt.Errorf("read partition state: %w", err)
	}
	return st, nil
}

// maintainPartitions runs partitions.CreateAhead and Sweep on a session
// that holds the prune lock (PruneSessionLock) meanwhile.
func (p *pgHouseDB) maintainPartitions(ctx context.Context, pp partitionParams) (partitionRound, error) {
	leaves, err := partitions.List(ctx, p.db, p.sql.names)
	if err != nil {
		return partitionRound{}, err
	}
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return partitionRound{}, err
	}
	defer conn.Close()
	var locked bool
	if err := conn.QueryRowContext(ctx, p.sql.pruneSessionLock).Scan(&locked); err != nil || !locked {
		return partitionRound{}, err // another relay maintains them
	}
	defer func() {
		// A fresh context: the lock must go back with the session to the pool.
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
		defer ucancel()
		// Not unlocked (false) if the table's OID, the lock's key, changed
		// meanwhile (the outbox was converted to a partitioned one).
		var unlocked bool
		if err := conn.QueryRowContext(uctx, p.sql.pruneSessionUnlock).Scan(&unlocked); err != nil || !unlocked {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // drop the session, and its lock
		}
	}()
	to := partitions.Timeouts{Lock: partitions.LockTimeout, Statement: p.timeout}
	round := partitionRound{locked: true, top: partitions.Top(leaves)}
	round.created, round.createErr = partitions.CreateAhead(ctx, conn, p.table, leaves, pp.maxID, to)
	round.dropped, round.kept, round.dropErr = partitions.Sweep(ctx, conn, p.sql.names, leaves, pp.floor, pp.retention, to)
	return round, nil
}

// pruneBatch runs PruneLock, then, if it got the lock, Prune on the table
// or a partition, in one transaction under SettleSettings.
func (p *pgHouseDB) pruneBatch(ctx context.Context, pp pruneParams) (deleted int64, locked bool, err error) {
	q := p.sql.prune
	if pp.partition != "" {
		q = p.sql.names.ForPartition(pp.partition).Render(outboxsql.Prune)
	}
	_, err = settle(ctx, p.db, p.sql, p.timeout, p.lock, func(tx *sql.Tx) (int64, error) {
		if err := tx.QueryRowContext(ctx, p.sql.pruneLock).Scan(&locked); err != nil {
			return 0, fmt.Errorf("lock: %w", err)
		}
		if !locked {
			return 0, nil
		}
		res, err := tx.ExecContext(ctx, q, outboxsql.PruneArgs{Retention: pp.retention, Batch: pp.batch}.Args()...)
		if err != nil {
			return 0, fmt.Errorf("delete: %w", err)
		}
		deleted, err = res.RowsAffected()
		return deleted, err
	})
	if err != nil {
		return 0, locked, err
	}
	return deleted, locked, nil
}

// statsConn holds one of the pool's connections; its readings run on it
// through tableTx.
func (p *pgHouseDB) statsConn(ctx context.Context) (statsConn, error) {
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return &pgStatsConn{tx: p.tx, sql: p.sql, conn: conn}, nil
}

// pgStatsConn runs the stats readings on conn.
type pgStatsConn struct {
	tx   *tableTx
	sql  *statements
	conn *sql.Conn
}

// lag runs StatsLags.
func (c *pgStatsConn) lag(ctx context.Context, limit int) (statsLag, error) {
	var l statsLag
	args := outboxsql.CountArgs{Cap: limit}.Args()
	if err := c.tx.queryOn(ctx, c.conn, scanRow(&l.oldest, &l.due, &l.now), c.sql.statsLag, args...); err != nil {
		return statsLag{}, err
	}
	return l, nil
}

// backlog runs StatsBacklogScheduled.
func (c *pgStatsConn) backlog(ctx context.Context, limit int) (unpublished, scheduled int64, err error) {
	args := outboxsql.CountArgs{Cap: limit}.Args()
	if err := c.tx.queryOn(ctx, c.conn, scanRow(&unpublished, &scheduled), c.sql.statsBacklog, args...); err != nil {
		return 0, 0, err
	}
	return unpublished, scheduled, nil
}

// dead runs StatsDead.
func (c *pgStatsConn) dead(ctx context.Context, limit int) (int64, error) {
	var n int64
	if err := c.tx.queryOn(ctx, c.conn, scanRow(&n), c.sql.statsDead, outboxsql.CountArgs{Cap: limit}.Args()...); err != nil {
		return 0, err
	}
	return n, nil
}

func (c *pgStatsConn) close() { c.conn.Close() }

// repair runs RepairRetryAt after WalkSettings.
func (p *pgHouseDB) repair(ctx context.Context, rp repairParams) ([]repairedRow, error) {
	var rows []repairedRow
	scan := func(rs rowScanner) error {
		for rs.Next() {
			var row repairedRow
			if err := rs.Scan(&row.id, &row.due); err != nil {
				return err
			}
			rows = append(rows, row)
		}
		return nil
	}
	args := outboxsql.RepairArgs{Window: rp.window, Shards: rp.shards}.Args()
	if err := p.tx.walk(ctx, step{query: p.sql.repair, args: args, scan: scan}); err != nil {
		return nil, err
	}
	// UPDATE ... RETURNING does not keep the subquery's order.
	slices.SortFunc(rows, func(a, b repairedRow) int { return cmp.Compare(a.id, b.id) })
	return rows, nil
}

// floorStart runs ClaimFloorStart.
func (p *pgHouseDB) floorStart(ctx context.Context) (floorProof, error) {
	var pr outboxsql.ClaimFloorProof
	if err := p.tx.query(ctx, scanRow(&pr.MaxID, &pr.XMax, &pr.VXIDs, &pr.Gen, &pr.Floor), p.sql.floorStart); err != nil {
		return floorProof{}, err
	}
	return floorProof{gen: pr.Gen, idle: pr.Idle(), db: pr}, nil
}

// floorPassed runs ClaimFloorPassed: it names no table, so it runs on its
// own, outside tableTx.
func (p *pgHouseDB) floorPassed(ctx context.Context, fp floorProof) (bool, error) {
	pr, err := pgProof(fp)
	if err != nil {
		return false, err
	}
	var passed bool
	if err := p.db.QueryRowContext(ctx, p.sql.floorPassed, pr.PassedArgs()...).Scan(&passed); err != nil {
		return false, err
	}
	return passed, nil
}

// floorRaise runs ClaimFloorRaise, which returns no row when it raised
// nothing.
func (p *pgHouseDB) floorRaise(ctx context.Context, fp floorProof) (int64, bool, error) {
	pr, err := pgProof(fp)
	if err != nil {
		return 0, false, err
	}
	var floor int64
	switch err := p.tx.query(ctx, scanRow(&floor), p.sql.floorRaise, pr.RaiseArgs()...); {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return floor, true, nil
}

// pgProof is the PostgreSQL proof floorStart started.
func pgProof(fp floorProof) (outboxsql.ClaimFloorProof, error) {
	pr, ok := fp.db.(outboxsql.ClaimFloorProof)
	if !ok {
		return outboxsql.ClaimFloorProof{}, fmt.Errorf("claim floor proof %T is not a PostgreSQL one", fp.db)
	}
	return pr, nil
}

// floorRead runs ClaimFloorRead.
func (p *pgHouseDB) floorRead(ctx context.Context) (int64, error) {
	var floor int64
	if err := p.tx.query(ctx, scanRow(&floor), p.sql.floorRead); err != nil {
		return 0, err
	}
	return floor, nil
}

// claimRanges lists the partitions (partitions.List) and keeps those of
// a range with an upper bound.
func (p *pgHouseDB) claimRanges(ctx context.Context) ([]idRange, error) {
	leaves, err := partitions.List(ctx, p.db, p.sql.names)
	if err != nil {
		return nil, err
	}
	var out []idRange
	for _, l := range leaves {
		if l.Bound.Default || !l.Bound.HasTo {
			continue
		}
		from := max(l.Bound.From, 0)
		if !l.Bound.HasFrom {
			from = 0
		}
		out = append(out, idRange{name: l.Name, from: from, to: l.Bound.To})
	}
	return out, nil
}

// firstUnpublished runs ClaimLow of each of ranges, in one statement
// under WalkSettings.
func (p *pgHouseDB) firstUnpublished(ctx context.Context, ranges []idRange) (int64, bool, error) {
	parts := make([]outboxsql.PartitionVars, len(ranges))
	for i, r := range ranges {
		parts[i] = outboxsql.PartitionVars{Partition: r.name, From: r.from}
	}
	var first sql.NullInt64
	if err := p.tx.walk(ctx, step{query: outboxsql.RenderClaimLow(p.sql.names, parts), scan: scanRow(&first)}); err != nil {
		return 0, false, err
	}
	return first.Int64, first.Valid, nil
}
