package outboxadmin

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// adminDB is an Admin's database: every statement its reads and changes
// send to one table, and how they are bounded. An implementation holds
// all of one database's SQL for them (pgAdminDB: PostgreSQL; mysqlAdminDB:
// MySQL and MariaDB); what a retry locks and in which order, how a replay
// is cut into transactions, which ids are missing, is written once above
// it, in the Admin's methods.
//
// Each read runs under the caller's context, which the Admin bounds by
// Config.StatementTimeout. What a database cannot read returns an error
// matching errors.ErrUnsupported (topicStats, locks on MySQL), or the
// empty answer where that is the truth (no WAL relay's slot on MySQL).
type adminDB interface {
	// stats reads the totals and, where the database has them, the
	// per-topic figures (Status's Stats).
	stats(ctx context.Context) (txoutbox.Stats, error)
	// topicStats reads the per-topic figures (TopicStats).
	topicStats(ctx context.Context) ([]txoutbox.TopicStats, error)
	// counts reads Snapshot's figures.
	counts(ctx context.Context) (counts, error)
	// lag reads the time the oldest unpublished row became due (none:
	// not Valid) and the database clock.
	lag(ctx context.Context) (oldest sql.NullTime, now time.Time, err error)
	// relays reads the registered relays by id, with their heartbeat's
	// age by the database clock; Alive and Shards are left to the Admin.
	relays(ctx context.Context) ([]RelayStatus, error)
	// shards reads every shard and its owner ("" when free), in shard
	// order.
	shards(ctx context.Context) ([]shardOwner, error)
	// handovers reads the shards in handover (Status.Handovers).
	handovers(ctx context.Context) ([]int, error)
	// slot reads the WAL relay's slot (Config.Slot or the table's), nil
	// when there is none in the database.
	slot(ctx context.Context) (*SlotStatus, error)
	// walSlots names the WAL relays' slots that may stream the table, ""
	// for none, outside any transaction (a dry run's check).
	walSlots(ctx context.Context) (string, error)
	// row reads one row with its payload (sql.ErrNoRows: none).
	row(ctx context.Context, id int64) (Row, error)
	// deadList reads a page of the dead rows f selects, in id order,
	// above after, at most limit.
	deadList(ctx context.Context, f outboxsql.DeadArgs, after int64, limit int) ([]Row, error)
	// deadCount counts the dead rows f selects, up to limit.
	deadCount(ctx context.Context, f outboxsql.DeadArgs, limit int) (int64, error)
	// lookup reads the rows of an event id or of an aggregate id, newest
	// first, at most q.limit.
	lookup(ctx context.Context, q lookupQuery) ([]Row, error)
	// replaySelect reads the published rows f selects, each aggregate's
	// in id order, and the aggregates' first rows in id order: grouped by
	// aggregate (OpsReplaySelect) or all in id order
	// (MySQLOpsReplaySelect).
	replaySelect(ctx context.Context, f ReplayFilter) ([]replayRow, error)
	// locks reads the sessions that hold or wait for a lock the relays'
	// statements wait behind (Locks).
	locks(ctx context.Context) ([]Lock, error)
	// inTx runs fn in an operator transaction, bounded on the server by
	// timeout (statements, lock waits, idleness), and commits it if
	// commit, else rolls it back (a dry run: the same locks, the same
	// rows, no change).
	inTx(ctx context.Context, timeout time.Duration, commit bool, fn func(opTx) error) error
}

// opTx is an operator transaction's statements (adminDB.inTx). A list of
// ids or aggregates may be of any length: an implementation that binds
// fewer per statement runs several in the transaction.
type opTx interface {
	// walSlots is adminDB.walSlots in the transaction, after it has taken
	// the WAL gate (OpsWALGate): it must run before any row lock.
	walSlots(ctx context.Context) (string, error)
	// lockDead locks the dead rows f selects and returns them in id order.
	lockDead(ctx context.Context, f outboxsql.DeadArgs) ([]Row, error)
	// claimGate holds the relays' claims back until the transaction
	// ends, after the claims in progress end (OpsClaimGate).
	claimGate(ctx context.Context) error
	// lockUnpublished locks the unpublished rows of the aggregates and
	// returns the ids of those claimed, per aggregate.
	lockUnpublished(ctx context.Context, aggregates []string) (map[string][]int64, error)
	// retry returns the dead rows ids to pending (OpsRetry) and returns
	// how many it changed.
	retry(ctx context.Context, ids []int64) (int64, error)
	// drop deletes the dead rows ids (OpsDrop) and returns how many.
	drop(ctx context.Context, ids []int64) (int64, error)
	// pruneLock waits for a prune in progress and holds pruning back
	// until the transaction ends (OpsPruneLock).
	pruneLock(ctx context.Context) error
	// replay returns those of the rows ids still published to pending
	// (OpsReplay) and returns them.
	replay(ctx context.Context, ids []int64) ([]replayRow, error)
	// lowerFloor lowers the claim floor to the lowest of ids
	// (OpsLowerFloor).
	lowerFloor(ctx context.Context, ids []int64) error
	// wake wakes the relays once the transaction commits (OpsWake).
	wake(ctx context.Context) error
}

// victimAttempts is how many times an operator's transaction runs when the
// database ends it as a deadlock's victim (victim): a retry or replay
// locks rows and the claim gate in one order, a relay settling its claims
// takes them in another, so one of them may be chosen while relays run.
// The victim's work was rolled back whole; running it again is what the
// operator would do.
const victimAttempts = 3

// victim reports whether err is the database ending the transaction so
// that another could go on: a deadlock (PostgreSQL 40P01, MySQL 1213) or
// a serialization failure (40001).
func victim(err error) bool {
	switch outboxsql.SQLState(err) {
	case "40P01", "40001":
		return true
	}
	return outboxsql.MySQLErrorNumber(err) == 1213
}

// retryVictim runs op, and again, up to victimAttempts in all, while it
// fails as a deadlock's victim (a short pause between, growing), and
// returns its last error.
func retryVictim(ctx context.Context, op func() error) error {
	var err error
	for attempt := 1; ; attempt++ {
		if err = op(); err == nil || !victim(err) || attempt == victimAttempts {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt*attempt) * 20 * time.Millisecond):
		}
	}
}

// runTx begins a transaction on b (the pool, or one connection of it)
// with opts, runs fn in it, and commits it if commit, else rolls it back:
// adminDB.inTx's frame.
func runTx(ctx context.Context, b interface {
	BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
}, opts *sql.TxOptions, commit bool, fn func(*sql.Tx) error) error {
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	if !commit {
		return nil
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// counts are Snapshot's figures as read: the unpublished rows (scheduled
// ones included), dead and scheduled rows, each up to its cap; the due
// times the lags count from, the next scheduled row's; the highest row id
// and the database clock.
type counts struct {
	unpublished, dead, scheduled int64
	oldest, due, next            sql.NullTime
	lastID                       int64
	at                           time.Time
}

// snapshot is c as a Snapshot (see outboxsql.CountsOf).
func (c counts) snapshot() Snapshot {
	s := Snapshot{LastID: c.lastID, At: c.at}
	n := outboxsql.CountsOf(c.unpublished, c.dead, c.scheduled)
	s.Backlog, s.Dead, s.Scheduled = n.Backlog, n.Dead, n.Scheduled
	s.BacklogEstimated, s.DeadEstimated, s.ScheduledEstimated = n.BacklogEstimated, n.DeadEstimated, n.ScheduledEstimated
	if c.oldest.Valid {
		s.Lag = max(c.at.Sub(c.oldest.Time), 0)
	}
	if c.due.Valid {
		s.DueLag = max(c.at.Sub(c.due.Time), 0)
	}
	if c.next.Valid {
		s.NextScheduled = c.next.Time
	}
	return s
}

// shardOwner is a shard and its owner, "" when free.
type shardOwner struct {
	shard int
	owner string
}

// lookupQuery is what FindEvents looks up: an event id (canonical text),
// or else an aggregate id.
type lookupQuery struct {
	eventID, aggregate string
	recent             int // Config.LookupWindow
	limit              int
}

// replayRow is a published row a replay selected or returned to pending.
type replayRow struct {
	aggregate string // not read by opTx.replay
	id        int64
	topic     string
}

// The scanners of the statements both databases have, each of one row of
// the same columns (see collect).

// scanRelay reads a row of OpsRelays or MySQLOpsRelays.
func scanRelay(s scanner) (RelayStatus, error) {
	var (
		r                  RelayStatus
		started, heartbeat outboxsql.MySQLTime // see scanRow
		age                float64
	)
	if err := s.Scan(&r.ID, &r.Host, &started, &heartbeat, &age); err != nil {
		return RelayStatus{}, err
	}
	r.StartedAt, r.HeartbeatAt = started.Time, heartbeat.Time
	r.HeartbeatAge = max(time.Duration(age*float64(time.Second)), 0)
	return r, nil
}

// scanShard reads a row of OpsShards or MySQLOpsShards.
func scanShard(s scanner) (shardOwner, error) {
	var o shardOwner
	err := s.Scan(&o.shard, &o.owner)
	return o, err
}

// scanInt reads a statement's one integer column.
func scanInt(s scanner) (int, error) {
	var n int
	err := s.Scan(&n)
	return n, err
}

// scanReplaySelected reads a row of OpsReplaySelect or
// MySQLOpsReplaySelect.
func scanReplaySelected(s scanner) (replayRow, error) {
	var r replayRow
	err := s.Scan(&r.aggregate, &r.id, &r.topic)
	return r, err
}

// scanReplayed reads a row of OpsReplay or MySQLOpsReplayLock.
func scanReplayed(s scanner) (replayRow, error) {
	var r replayRow
	err := s.Scan(&r.id, &r.topic)
	return r, err
}

// lockedRow is a row of OpsLockUnpublished or MySQLOpsLockUnpublished.
type lockedRow struct {
	id        int64
	aggregate string
	claimed   bool
}

func scanLocked(s scanner) (lockedRow, error) {
	var (
		r     lockedRow
		state string
	)
	if err := s.Scan(&r.id, &r.aggregate, &state); err != nil {
		return lockedRow{}, err
	}
	r.claimed = state == "claimed"
	return r, nil
}

// claimedByAggregate is the ids of the claimed rows among rows, per
// aggregate, in id order.
func claimedByAggregate(rows []lockedRow) map[string][]int64 {
	claimed := map[string][]int64{}
	for _, r := range rows {
		if r.claimed {
			claimed[r.aggregate] = append(claimed[r.aggregate], r.id)
		}
	}
	for _, ids := range claimed {
		slices.Sort(ids)
	}
	return claimed
}
