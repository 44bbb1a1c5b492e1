package relay

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// statements are the relay's SQL, rendered once for its table.
type statements struct {
	claim, claimSettings, settleSettings, markUndecodable, shardsInHandover, walkSettings     string
	markPublished, fail, release                                                              string
	register, replacePredecessors, otherIncarnations, heartbeat, notifyRebalance, forgetStale string
	liveRelays, releaseShards, acquireShards, ownedShards, leaveShards, leaveRelay            string
	prune, pruneLock, pruneSessionLock, pruneSessionUnlock, statsLag, statsBacklog, statsDead string
	walGate, walSlots                                                                         string
	floorStart, floorPassed, floorRaise, floorRead, repair                                    string
	txTimeouts, lockProbe, lockProbeGates                                                     string
	table, walSlot                                                                            string          // arguments: the table of claimSettings, walGate and walSlots
	names                                                                                     outboxsql.Names // for the statements rendered per partition
}

// render renders the statements for the table of n; walSlot is the WAL
// relay's default slot name for it of before the names were keyed by the
// database (RelayWALSlots computes today's itself).
func render(n outboxsql.Names, walSlot string) *statements {
	return &statements{
		claim:               n.Render(outboxsql.Claim),
		claimSettings:       n.Render(outboxsql.ClaimSettings),
		settleSettings:      outboxsql.SettleSettings,
		markUndecodable:     n.Render(outboxsql.MarkUndecodable),
		shardsInHandover:    n.Render(outboxsql.ShardsInHandover),
		walkSettings:        outboxsql.WalkSettings,
		markPublished:       n.Render(outboxsql.MarkPublished),
		fail:                n.Render(outboxsql.Fail),
		release:             n.Render(outboxsql.Release),
		register:            n.Render(outboxsql.Register),
		replacePredecessors: n.Render(outboxsql.ReplacePredecessors),
		otherIncarnations:   n.Render(outboxsql.OtherIncarnations),
		heartbeat:           n.Render(outboxsql.Heartbeat),
		notifyRebalance:     n.Render(outboxsql.NotifyRebalance),
		forgetStale:         n.Render(outboxsql.ForgetStaleRelays),
		liveRelays:          n.Render(outboxsql.LiveRelays),
		releaseShards:       n.Render(outboxsql.ReleaseShards),
		acquireShards:       n.Render(outboxsql.AcquireShards),
		ownedShards:         n.Render(outboxsql.OwnedShards),
		leaveShards:         n.Render(outboxsql.LeaveShards),
		leaveRelay:          n.Render(outboxsql.LeaveRelay),
		prune:               n.Render(outboxsql.Prune),
		pruneLock:           n.Render(outboxsql.PruneLock),
		pruneSessionLock:    n.Render(outboxsql.PruneSessionLock),
		pruneSessionUnlock:  n.Render(outboxsql.PruneSessionUnlock),
		statsLag:            n.Render(outboxsql.StatsLags),
		statsBacklog:        n.Render(outboxsql.StatsBacklogScheduled),
		statsDead:           n.Render(outboxsql.StatsDead),
		walGate:             outboxsql.OpsWALGate,
		floorStart:          n.Render(outboxsql.ClaimFloorStart),
		floorPassed:         outboxsql.ClaimFloorPassed,
		floorRaise:          n.Render(outboxsql.ClaimFloorRaise),
		floorRead:           n.Render(outboxsql.ClaimFloorRead),
		repair:              n.Render(outboxsql.RepairRetryAt),
		walSlots:            outboxsql.RelayWALSlots,
		txTimeouts:          outboxsql.TxTimeouts,
		lockProbe:           n.Render(outboxsql.LockProbe),
		lockProbeGates:      n.Render(outboxsql.LockProbeGates),
		table:               n.Table,
		walSlot:             walSlot,
		names:               n,
	}
}

// serverTimeout is the statement and lock timeout a relay
// transaction sets on the server: at most limit, and short of what is left
// of ctx, so that the server ends a statement that waits too long before
// the client gives up on it. A statement the server cancels leaves its
// connection idle, with its prepared statements and plans; one whose
// context ends first leaves it closed (pgx), and the next statement on a
// new connection is planned again. A Group's claim connections are kept
// for their plans (claimConns).
func serverTimeout(ctx context.Context, limit time.Duration) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return limit
	}
	left := time.Until(dl)
	// The margin is for the server's error to reach the client, a quarter
	// of what is left up to serverTimeoutMargin.
	return max(time.Millisecond, min(limit, left-min(left/4, serverTimeoutMargin)))
}

// serverTimeoutMargin is serverTimeout's most time between the server's
// timeout and the client's deadline.
const serverTimeoutMargin = time.Second

// settle runs fn in a transaction with the relay's server-side timeouts
// (timeout, and lock for lock waits: Config.StatementTimeout and
// LockTimeout) that commits durably (see outboxsql.SettleSettings), and returns what fn
// returned: for what takes rows out of memory (failures, releases), a
// registration, a prune.
func settle(ctx context.Context, db *sql.DB, q *statements, timeout, lock time.Duration, fn func(*sql.Tx) (int64, error)) (int64, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, q.settleSettings, outboxsql.TxTimeoutArgs{Wait: serverTimeout(ctx, timeout), Idle: timeout, Lock: lock}.Args()...); err != nil {
		return 0, fmt.Errorf("settings: %w", err)
	}
	n, err := fn(tx)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return n, nil
}
