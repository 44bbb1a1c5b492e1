package relay

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// pgMemberDB is the membership on PostgreSQL: Register and
// ReplacePredecessors; Heartbeat, ForgetStaleRelays, OwnedShards and
// LiveRelays; ReleaseShards and AcquireShards; ShardsInHandover;
// OtherIncarnations; LeaveShards and LeaveRelay; OpsWALGate and
// RelayWALSlots; and NotifyRebalance, which peers LISTEN for (see
// listener and hub).
type pgMemberDB struct {
	db      *sql.DB  // register's transaction and the notification
	tx      *tableTx // runs the statements on the relays and shards tables
	sql     *statements
	timeout time.Duration // Config.StatementTimeout
	lock    time.Duration // Config.LockTimeout
}

var (
	_ memberDB          = (*pgMemberDB)(nil)
	_ rebalanceNotifier = (*pgMemberDB)(nil)
)

func newPGMemberDB(db *sql.DB, tx *tableTx, q *statements, cfg Config) *pgMemberDB {
	return &pgMemberDB{db: db, tx: tx, sql: q, timeout: cfg.StatementTimeout, lock: cfg.LockTimeout}
}

// register runs Register and ReplacePredecessors in one transaction under
// SettleSettings.
func (p *pgMemberDB) register(ctx context.Context, r registration) ([]string, error) {
	var replaced []string
	_, err := settle(ctx, p.db, p.sql, p.timeout, p.lock, func(tx *sql.Tx) (int64, error) {
		if _, err := tx.ExecContext(ctx, p.sql.register, outboxsql.RegisterArgs{Owner: r.owner, Name: r.name, Host: r.host}.Args()...); err != nil {
			return 0, err
		}
		rows, err := tx.QueryContext(ctx, p.sql.replacePredecessors, outboxsql.ReplaceArgs{Name: r.name, Owner: r.owner}.Args()...)
		if err != nil {
			return 0, fmt.Errorf("replace earlier incarnations: %w", err)
		}
		replaced, err = scanStrings(rows)
		return 0, err
	})
	if err != nil {
		return nil, err
	}
	return replaced, nil
}

// heartbeat runs Heartbeat, ForgetStaleRelays, OwnedShards and LiveRelays
// in one transaction (tableTx).
func (p *pgMemberDB) heartbeat(ctx context.Context, hp heartbeatParams) (heartbeat, error) {
	var (
		hb heartbeat
		n  = int64(-1)
	)
	live, err := p.live(ctx, step{query: p.sql.heartbeat, args: []any{hp.owner}, affected: &n},
		p.forgetStale(hp.staleAfter, &hb.forgotten),
		step{query: p.sql.ownedShards, args: []any{hp.owner}, scan: scanRow(&hb.held)})
	hb.dead = n == 0
	if err != nil {
		return heartbeat{dead: hb.dead}, err
	}
	hb.live = live
	return hb, nil
}

// liveRelays runs ForgetStaleRelays and LiveRelays in one transaction
// (tableTx).
func (p *pgMemberDB) liveRelays(ctx context.Context, staleAfter time.Duration) (forgotten, live []string, err error) {
	live, err = p.live(ctx, p.forgetStale(staleAfter, &forgotten))
	if err != nil {
		return nil, nil, err
	}
	return forgotten, live, nil
}

// forgetStale is ForgetStaleRelays' step, reading the ids it deleted into
// forgotten.
func (p *pgMemberDB) forgetStale(staleAfter time.Duration, forgotten *[]string) step {
	return step{query: p.sql.forgetStale, args: []any{outboxsql.Interval(staleAfter)}, scan: scanInto(forgotten)}
}

// live lists the names of the live incarnations, after the steps before,
// in their transaction.
func (p *pgMemberDB) live(ctx context.Context, before ...step) ([]string, error) {
	var names []string
	err := p.tx.steps(ctx, append(before, step{query: p.sql.liveRelays, scan: func(rows rowScanner) error {
		for rows.Next() {
			var id, name string
			if err := rows.Scan(&id, &name); err != nil {
				return err
			}
			names = append(names, name)
		}
		return rows.Err()
	}})...)
	return names, err
}

// moveShards runs ReleaseShards and AcquireShards in one transaction
// (tableTx): each statement of it costs a round trip, the transaction one
// more.
func (p *pgMemberDB) moveShards(ctx context.Context, sp shardsParams) (int64, []int16, error) {
	want := outboxsql.ShardsArgs{Owner: sp.owner, Shards: sp.shards}
	var (
		released int64
		owned    []int16
	)
	err := p.tx.steps(ctx, step{query: p.sql.releaseShards, args: want.Args(), affected: &released},
		step{query: p.sql.acquireShards, args: want.Args(), scan: scanInto(&owned)})
	if err != nil {
		return 0, nil, err
	}
	slices.Sort(owned)
	return released, owned, nil
}

// shardsInHandover runs ShardsInHandover after its settings
// (WalkSettings).
func (p *pgMemberDB) shardsInHandover(ctx context.Context, hp handoverParams) ([]int16, error) {
	args := outboxsql.HandoverArgs{Owner: hp.owner, Shards: hp.shards, Window: hp.window}
	var busy []int16
	err := p.tx.walk(ctx, step{query: p.sql.shardsInHandover, args: args.Args(), scan: scanInto(&busy)})
	slices.Sort(busy)
	return busy, err
}

// otherIncarnations runs OtherIncarnations (tableTx).
func (p *pgMemberDB) otherIncarnations(ctx context.Context, op othersParams) (int, error) {
	args := outboxsql.OtherIncarnationsArgs{Name: op.name, Own: op.own, StaleAfter: op.staleAfter}
	var n int
	err := p.tx.query(ctx, scanRow(&n), p.sql.otherIncarnations, args.Args()...)
	return n, err
}

// leaveShards runs LeaveShards (tableTx).
func (p *pgMemberDB) leaveShards(ctx context.Context, owner string) error {
	_, err := p.tx.exec(ctx, p.sql.leaveShards, owner)
	return err
}

// leaveRelay runs LeaveRelay (tableTx).
func (p *pgMemberDB) leaveRelay(ctx context.Context, owner string) error {
	_, err := p.tx.exec(ctx, p.sql.leaveRelay, owner)
	return err
}

// walSlot runs OpsWALGate and RelayWALSlots in one transaction whose
// statements name no table (tableTx.catalog).
func (p *pgMemberDB) walSlot(ctx context.Context) (string, error) {
	var slots string
	err := p.tx.catalog(ctx, step{query: p.sql.walGate, args: []any{p.sql.table}},
		step{query: p.sql.walSlots, args: outboxsql.WALSlotsArgs{Table: p.sql.table, Slot: p.sql.walSlot}.Args(), scan: scanRow(&slots)})
	return slots, err
}

// notifyRebalance runs NotifyRebalance on its own, outside tableTx.
func (p *pgMemberDB) notifyRebalance(ctx context.Context) error {
	_, err := p.db.ExecContext(ctx, p.sql.notifyRebalance)
	return err
}

// scanStrings is scanAll of a text column.
func scanStrings(rows *sql.Rows) ([]string, error) { return scanAll[string](rows) }

// scanInto returns a scan that appends the values of rows of one column
// to out.
func scanInto[T any](out *[]T) func(rowScanner) error {
	return func(rows rowScanner) error {
		for rows.Next() {
			var v T
			if err := rows.Scan(&v); err != nil {
				return err
			}
			*out = append(*out, v)
		}
		return rows.Err()
	}
}

// scanAll reads the values of rows of one column, and closes them.
func scanAll[T any](rows *sql.Rows) ([]T, error) {
	defer rows.Close()
	var out []T
	err := scanInto(&out)(rows)
	return out, err
}
