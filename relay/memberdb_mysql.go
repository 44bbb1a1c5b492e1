package relay

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// mysqlMemberDB is the membership on MySQL and MariaDB
// (internal/outboxsql/mysql_members.go), each operation in a mysqlTx
// transaction. Where PostgreSQL's statements return what they change,
// MySQL's lock and read the ids first, then change them by id, in the same
// transaction. It has no rebalanceNotifier (no LISTEN/NOTIFY: peers see a
// change at their next heartbeat), and no WAL relays.
type mysqlMemberDB struct {
	tx    *mysqlTx
	names outboxsql.Names
}

var _ memberDB = (*mysqlMemberDB)(nil)

// register runs MySQLPredecessors, MySQLRegister and MySQLDeleteRelays in
// one transaction, heeding no lockout. The predecessors are locked before
// the incarnation's row is inserted: their locking read waits for a row
// another relay inserted and has not committed, and that relay's own read
// would wait for this one's row, were it inserted first (a deadlock,
// 1213, between relays starting together).
func (m *mysqlMemberDB) register(ctx context.Context, r registration) ([]string, error) {
	var replaced []string
	err := m.tx.run(ctx, false, func(tx *sql.Tx) error {
		ids, err := queryAll[string](ctx, tx, m.names.Render(outboxsql.MySQLPredecessors), outboxsql.ReplaceArgs{Name: r.name, Owner: r.owner}.Args()...)
		if err != nil {
			return fmt.Errorf("replace earlier incarnations: %w", err)
		}
		args := outboxsql.RegisterArgs{Owner: r.owner, Name: r.name, Host: r.host}
		if _, err := tx.ExecContext(ctx, m.names.Render(outboxsql.MySQLRegister), args.Args()...); err != nil {
			return err
		}
		replaced = ids
		return m.deleteRelays(ctx, tx, ids)
	})
	if err != nil {
		return nil, err
	}
	return replaced, nil
}

// deleteRelays runs MySQLDeleteRelays on ids, if any.
func (m *mysqlMemberDB) deleteRelays(ctx context.Context, tx *sql.Tx, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, outboxsql.MySQLDeleteRelays(m.names, len(ids)), outboxsql.MySQLIDsArgs[string]{IDs: ids}.Args()...); err != nil {
		return fmt.Errorf("delete %d relays: %w", len(ids), err)
	}
	return nil
}

// forgetStale runs MySQLStaleRelays and MySQLDeleteRelays in tx.
func (m *mysqlMemberDB) forgetStale(ctx context.Context, tx *sql.Tx, staleAfter time.Duration) ([]string, error) {
	ids, err := queryAll[string](ctx, tx, m.names.Render(outboxsql.MySQLStaleRelays), outboxsql.MySQLStaleArgs{StaleAfter: staleAfter}.Args()...)
	if err != nil {
		return nil, fmt.Errorf("forget stale relays: %w", err)
	}
	return ids, m.deleteRelays(ctx, tx, ids)
}

// live runs MySQLLiveRelays in tx.
func (m *mysqlMemberDB) live(ctx context.Context, tx *sql.Tx) ([]string, error) {
	rows, err := tx.QueryContext(ctx, m.names.Render(outboxsql.MySQLLiveRelays))
	if err != nil {
		return nil, fmt.Errorf("live relays: %w", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, rows.Err()
}

// heartbeat runs MySQLHeartbeat, the stale relays' deletion,
// MySQLOwnedShards and MySQLLiveRelays in one transaction.
func (m *mysqlMemberDB) heartbeat(ctx context.Context, hp heartbeatParams) (heartbeat, error) {
	var hb heartbeat
	dead := false
	err := m.tx.run(ctx, true, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, m.names.Render(outboxsql.MySQLHeartbeat), outboxsql.MySQLOwnerArgs{Owner: hp.owner}.Args()...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		dead = n == 0
		if hb.forgotten, err = m.forgetStale(ctx, tx, hp.staleAfter); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, m.names.Render(outboxsql.MySQLOwnedShards), hp.owner).Scan(&hb.held); err != nil {
			return fmt.Errorf("owned shards: %w", err)
		}
		hb.live, err = m.live(ctx, tx)
		return err
	})
	if err != nil {
		return heartbeat{dead: dead}, err
	}
	hb.dead = dead
	return hb, nil
}

// liveRelays runs the stale relays' deletion and MySQLLiveRelays in one
// transaction.
func (m *mysqlMemberDB) liveRelays(ctx context.Context, staleAfter time.Duration) (forgotten, live []string, err error) {
	err = m.tx.run(ctx, true, func(tx *sql.Tx) error {
		var err error
		if forgotten, err = m.forgetStale(ctx, tx, staleAfter); err != nil {
			return err
		}
		live, err = m.live(ctx, tx)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return forgotten, live, nil
}

// moveShards runs MySQLReleaseShards, MySQLAcquireShards and
// MySQLOwnedShardList in one transaction.
func (m *mysqlMemberDB) moveShards(ctx context.Context, sp shardsParams) (int64, []int16, error) {
	var (
		released int64
		owned    []int16
	)
	err := m.tx.run(ctx, true, func(tx *sql.Tx) error {
		args := outboxsql.MySQLShardsArgs{Owner: sp.owner, Shards: sp.shards}.Args()
		res, err := tx.ExecContext(ctx, outboxsql.MySQLReleaseShards(m.names, len(sp.shards)), args...)
		if err != nil {
			return fmt.Errorf("release shards: %w", err)
		}
		if released, err = res.RowsAffected(); err != nil {
			return err
		}
		if len(sp.shards) > 0 {
			if _, err := tx.ExecContext(ctx, outboxsql.MySQLAcquireShards(m.names, len(sp.shards)), args...); err != nil {
				return fmt.Errorf("acquire shards: %w", err)
			}
		}
		owned, err = queryAll[int16](ctx, tx, m.names.Render(outboxsql.MySQLOwnedShardList), sp.owner)
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	slices.Sort(owned)
	return released, owned, nil
}

// shardsInHandover runs MySQLShardsInHandover.
func (m *mysqlMemberDB) shardsInHandover(ctx context.Context, hp handoverParams) ([]int16, error) {
	var busy []int16
	err := m.tx.run(ctx, true, func(tx *sql.Tx) error {
		args := outboxsql.MySQLHandoverArgs{Owner: hp.owner, Shards: hp.shards, Window: hp.window}
		var err error
		busy, err = queryAll[int16](ctx, tx, outboxsql.MySQLShardsInHandover(m.names, len(hp.shards)), args.Args()...)
		return err
	})
	slices.Sort(busy)
	return busy, err
}

// otherIncarnations runs MySQLOtherIncarnations.
func (m *mysqlMemberDB) otherIncarnations(ctx context.Context, op othersParams) (int, error) {
	var n int
	err := m.tx.run(ctx, true, func(tx *sql.Tx) error {
		args := outboxsql.MySQLOtherIncarnationsArgs{Name: op.name, Own: op.own, StaleAfter: op.staleAfter}
		return tx.QueryRowContext(ctx, outboxsql.MySQLOtherIncarnations(m.names, len(op.own)), args.Args()...).Scan(&n)
	})
	return n, err
}

// leaveShards runs MySQLLeaveShards.
func (m *mysqlMemberDB) leaveShards(ctx context.Context, owner string) error {
	return m.tx.run(ctx, true, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, m.names.Render(outboxsql.MySQLLeaveShards), owner)
		return err
	})
}

// leaveRelay runs MySQLLeaveRelay.
func (m *mysqlMemberDB) leaveRelay(ctx context.Context, owner string) error {
	return m.tx.run(ctx, true, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, m.names.Render(outboxsql.MySQLLeaveRelay), owner)
		return err
	})
}

// walSlot answers "": there are no WAL relays on MySQL.
func (m *mysqlMemberDB) walSlot(context.Context) (string, error) { return "", nil }
