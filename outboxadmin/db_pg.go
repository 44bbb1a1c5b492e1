package outboxadmin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// pgAdminDB is an Admin's database on PostgreSQL: the statements of
// internal/outboxsql/ops.go, rendered once for the table. Reads run on the
// pool, bounded by the caller's context (pgx cancels the statement on the
// server); operator transactions set their own statement_timeout,
// lock_timeout and idle_in_transaction_session_timeout (OpsTimeouts).
type pgAdminDB struct {
	db    *sql.DB
	table txoutbox.Table
	// slotName is the slot OpsWALSlots looks for besides those it finds
	// through the table (Admin.slotName).
	slotName string
	// configSlot is Config.Slot: the slot Status reports, "" to look for
	// one through the table.
	configSlot string
	sql        statements
}

var _ adminDB = (*pgAdminDB)(nil)

// statements are the operator statements rendered for one table.
type statements struct {
	row, lockUnpublished, retry, lowerFloor, drop, wake, pruneLock string
	replaySelect, replay, timeouts, claimGate, relays, shards      string
	handovers, snapshot, lookupAggregate, lookupEventID            string
	walGate, walSlots, walSlot, table, lag, topicStats             string
	locks                                                          string
	// deadList, deadLock and deadCount are in one form per set of
	// filters (outboxsql.DeadFilters), each naming only those.
	deadList, deadLock, deadCount [outboxsql.DeadForms]string
}

// render renders the operator statements for the table of n, once, when
// the Admin is built.
func render(n outboxsql.Names) statements {
	st := statements{
		row:             n.Render(outboxsql.OpsRow),
		lockUnpublished: n.Render(outboxsql.OpsLockUnpublished),
		retry:           n.Render(outboxsql.OpsRetry),
		lowerFloor:      n.Render(outboxsql.OpsLowerFloor),
		drop:            n.Render(outboxsql.OpsDrop),
		wake:            n.Render(outboxsql.OpsWake),
		pruneLock:       n.Render(outboxsql.OpsPruneLock),
		replaySelect:    n.Render(outboxsql.OpsReplaySelect),
		replay:          n.Render(outboxsql.OpsReplay),
		timeouts:        outboxsql.OpsTimeouts,
		claimGate:       n.Render(outboxsql.OpsClaimGate),
		relays:          n.Render(outboxsql.OpsRelays),
		shards:          n.Render(outboxsql.OpsShards),
		handovers:       n.Render(outboxsql.OpsHandovers),
		snapshot:        n.Render(outboxsql.OpsSnapshotScheduled),
		lookupAggregate: n.Render(outboxsql.OpsLookupAggregate),
		lookupEventID:   n.Render(outboxsql.OpsLookupEventID),
		walGate:         outboxsql.OpsWALGate,
		walSlots:        outboxsql.OpsWALSlots,
		walSlot:         outboxsql.WALSlot,
		table:           n.Table,
		lag:             n.Render(outboxsql.StatsLag),
		topicStats:      n.Render(outboxsql.TopicStats),
		locks:           n.Render(outboxsql.OpsLocks),
	}
	for f := range st.deadList {
		st.deadList[f] = n.Render(outboxsql.OpsDeadList(outboxsql.DeadFilters(f)))
		st.deadLock[f] = n.Render(outboxsql.OpsDeadLock(outboxsql.DeadFilters(f)))
		st.deadCount[f] = n.Render(outboxsql.OpsDeadCount(outboxsql.DeadFilters(f)))
	}
	return st
}

// stats is txoutbox.ReadTopicStats.
func (p *pgAdminDB) stats(ctx context.Context) (txoutbox.Stats, error) {
	return txoutbox.ReadTopicStats(ctx, p.db, p.table)
}

func (p *pgAdminDB) topicStats(ctx context.Context) ([]txoutbox.TopicStats, error) {
	rows, err := p.db.QueryContext(ctx, p.sql.topicStats, outboxsql.CountArgs{Cap: txoutbox.TopicStatsMax}.Args()...)
	return collect(rows, err, func(s scanner) (txoutbox.TopicStats, error) {
		var (
			t   txoutbox.TopicStats
			lag sql.NullFloat64
		)
		if err := s.Scan(&t.Topic, &t.Backlog, &lag, &t.Dead, &t.Scheduled); err != nil {
			return txoutbox.TopicStats{}, err
		}
		if lag.Valid {
			t.Lag = max(time.Duration(lag.Float64*float64(time.Second)), 0)
		}
		t.BacklogAtLeast, t.DeadAtLeast = t.Backlog >= txoutbox.TopicStatsMax, t.Dead >= txoutbox.TopicStatsMax
		return t, nil
	})
}

func (p *pgAdminDB) counts(ctx context.Context) (counts, error) {
	var c counts
	args := outboxsql.CountArgs{Cap: txoutbox.StatsExactMax}.Args()
	err := p.db.QueryRowContext(ctx, p.sql.snapshot, args...).Scan(&c.unpublished, &c.oldest, &c.dead, &c.lastID, &c.at, &c.scheduled, &c.next, &c.due)
	return c, err
}

func (p *pgAdminDB) lag(ctx context.Context) (oldest sql.NullTime, now time.Time, err error) {
	err = p.db.QueryRowContext(ctx, p.sql.lag).Scan(&oldest, &now)
	return oldest, now, err
}

func (p *pgAdminDB) relays(ctx context.Context) ([]RelayStatus, error) {
	rows, err := p.db.QueryContext(ctx, p.sql.relays)
	return collect(rows, err, scanRelay)
}

func (p *pgAdminDB) shards(ctx context.Context) ([]shardOwner, error) {
	rows, err := p.db.QueryContext(ctx, p.sql.shards)
	return collect(rows, err, scanShard)
}

func (p *pgAdminDB) handovers(ctx context.Context) ([]int, error) {
	rows, err := p.db.QueryContext(ctx, p.sql.handovers, outboxsql.OpsHandoverWindow)
	return collect(rows, err, scanInt)
}

// slot reads Config.Slot, or the first slot found through the table, nil
// when there is none in this database.
func (p *pgAdminDB) slot(ctx context.Context) (*SlotStatus, error) {
	s := SlotStatus{Name: p.configSlot}
	if s.Name == "" {
		found, err := p.walSlots(ctx)
		if err != nil {
			return nil, fmt.Errorf("look for the WAL relay's slot: %w", err)
		}
		if found == "" {
			return nil, nil
		}
		s.Name, _, _ = strings.Cut(found, ", ")
	}
	var (
		confirmed, plugin, database string
		here                        bool
	)
	err := p.db.QueryRowContext(ctx, p.sql.walSlot, s.Name).Scan(&s.Active, &s.WALStatus, &confirmed, &plugin, &database, &s.LagBytes, &here)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !here {
		return nil, nil // a slot of another database streams another outbox
	}
	if err != nil {
		return nil, fmt.Errorf("read replication slot %s: %w", s.Name, err)
	}
	return &s, nil
}

func (p *pgAdminDB) walSlots(ctx context.Context) (string, error) {
	return pgWALSlots(ctx, p.db, p)
}

// pgWALSlots runs OpsWALSlots on q (the pool, or a transaction).
func pgWALSlots(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, p *pgAdminDB) (string, error) {
	var slots string
	err := q.QueryRowContext(ctx, p.sql.walSlots, outboxsql.WALSlotsArgs{Table: p.sql.table, Slot: p.slotName}.Args()...).Scan(&slots)
	return slots, err
}

func (p *pgAdminDB) row(ctx context.Context, id int64) (Row, error) {
	var payload []byte
	r, err := scanRow(p.db.QueryRowContext(ctx, p.sql.row, id), &payload)
	if err != nil {
		return Row{}, err
	}
	r.Payload = payload
	return r, nil
}

func (p *pgAdminDB) deadList(ctx context.Context, f outboxsql.DeadArgs, after int64, limit int) ([]Row, error) {
	args := outboxsql.DeadListArgs{DeadArgs: f, After: after, Limit: limit}
	return queryRows(ctx, p.db, p.sql.deadList[f.Filters()], args.Args()...)
}

func (p *pgAdminDB) deadCount(ctx context.Context, f outboxsql.DeadArgs, limit int) (int64, error) {
	var n int64
	args := outboxsql.DeadCountArgs{DeadArgs: f, Cap: limit}
	err := p.db.QueryRowContext(ctx, p.sql.deadCount[f.Filters()], args.Args()...).Scan(&n)
	return n, err
}

func (p *pgAdminDB) lookup(ctx context.Context, q lookupQuery) ([]Row, error) {
	query, key := p.sql.lookupEventID, q.eventID
	if key == "" {
		query, key = p.sql.lookupAggregate, q.aggregate
	}
	args := outboxsql.LookupArgs{Key: key, Recent: q.recent, Limit: q.limit}
	return queryRows(ctx, p.db, query, args.Args()...)
}

func (p *pgAdminDB) replaySelect(ctx context.Context, f ReplayFilter) ([]replayRow, error) {
	rows, err := p.db.QueryContext(ctx, p.sql.replaySelect,
		outboxsql.ReplaySelectArgs{Since: f.Since, Topic: f.Topic, Aggregate: f.AggregateID}.Args()...)
	return collect(rows, err, scanReplaySelected)
}

func (p *pgAdminDB) locks(ctx context.Context) ([]Lock, error) {
	rows, err := p.db.QueryContext(ctx, p.sql.locks)
	return collect(rows, err, func(s scanner) (Lock, error) {
		var (
			l       Lock
			seconds float64
		)
		if err := s.Scan(&l.PID, &l.Relation, &l.Mode, &l.Granted, &l.Application, &l.State, &seconds, &l.Query); err != nil {
			return Lock{}, err
		}
		l.For = max(time.Duration(seconds*float64(time.Second)), 0)
		return l, nil
	})
}

// inTx runs fn in a transaction of the pool's default isolation (READ
// COMMITTED unless the server says otherwise) after OpsTimeouts, again if
// it was a deadlock's victim (retryVictim).
func (p *pgAdminDB) inTx(ctx context.Context, timeout time.Duration, commit bool, fn func(opTx) error) error {
	return retryVictim(ctx, func() error {
		return runTx(ctx, p.db, nil, commit, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, p.sql.timeouts, outboxsql.TimeoutArgs{Timeout: timeout}.Args()...); err != nil {
				return fmt.Errorf("set timeouts: %w", err)
			}
			return fn(&pgOpTx{tx: tx, p: p})
		})
	})
}

// pgOpTx is an operator transaction on PostgreSQL: each list is bound as
// one array.
type pgOpTx struct {
	tx *sql.Tx
	p  *pgAdminDB
}

var _ opTx = (*pgOpTx)(nil)

// walSlots takes the WAL gate (OpsWALGate), so a slot created after the
// check sees the transaction's rows as pending when it is made, then runs
// OpsWALSlots.
func (t *pgOpTx) walSlots(ctx context.Context) (string, error) {
	if _, err := t.tx.ExecContext(ctx, t.p.sql.walGate, t.p.sql.table); err != nil {
		return "", fmt.Errorf("take the WAL gate: %w", err)
	}
	return pgWALSlots(ctx, t.tx, t.p)
}

func (t *pgOpTx) lockDead(ctx context.Context, f outboxsql.DeadArgs) ([]Row, error) {
	return queryRows(ctx, t.tx, t.p.sql.deadLock[f.Filters()], f.Args()...)
}

func (t *pgOpTx) claimGate(ctx context.Context) error {
	_, err := t.tx.ExecContext(ctx, t.p.sql.claimGate)
	return err
}

func (t *pgOpTx) lockUnpublished(ctx context.Context, aggregates []string) (map[string][]int64, error) {
	rows, err := t.tx.QueryContext(ctx, t.p.sql.lockUnpublished, outboxsql.TextArray(aggregates))
	locked, err := collect(rows, err, scanLocked)
	if err != nil {
		return nil, err
	}
	return claimedByAggregate(locked), nil
}

func (t *pgOpTx) retry(ctx context.Context, ids []int64) (int64, error) {
	return affected(t.tx.ExecContext(ctx, t.p.sql.retry, outboxsql.Int64Array(ids)))
}

func (t *pgOpTx) drop(ctx context.Context, ids []int64) (int64, error) {
	return affected(t.tx.ExecContext(ctx, t.p.sql.drop, outboxsql.Int64Array(ids)))
}

// affected is the rows a statement changed.
func affected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t *pgOpTx) pruneLock(ctx context.Context) error {
	_, err := t.tx.ExecContext(ctx, t.p.sql.pruneLock)
	return err
}

func (t *pgOpTx) replay(ctx context.Context, ids []int64) ([]replayRow, error) {
	rows, err := t.tx.QueryContext(ctx, t.p.sql.replay, outboxsql.Int64Array(ids))
	return collect(rows, err, scanReplayed)
}

func (t *pgOpTx) lowerFloor(ctx context.Context, ids []int64) error {
	_, err := t.tx.ExecContext(ctx, t.p.sql.lowerFloor, outboxsql.Int64Array(ids))
	return err
}

func (t *pgOpTx) wake(ctx context.Context) error {
	_, err := t.tx.ExecContext(ctx, t.p.sql.wake)
	return err
}
