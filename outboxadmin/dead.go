package outboxadmin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"strconv"
	"strings"
	"time"
)

// ErrNotDead is returned by Retry and Drop, which then change nothing, when
// some of Filter.IDs select no row: the event does not exist, is not dead,
// or does not match the other filters.
var ErrNotDead = errors.New("outboxadmin: not dead or no such event")

// Filter selects dead events. Set fields narrow the selection (they are
// ANDed); an empty field does not filter.
type Filter struct {
	// IDs are outbox row ids (Row.ID).
	IDs []int64
	// Topic, AggregateID and Type match exactly.
	Topic       string
	AggregateID string
	Type        string
	// Since keeps events created at or after it.
	Since time.Time
	// Until keeps events created before it.
	Until time.Time
	// All must be set to select every dead event with no other field set.
	// It has no effect when another field is set.
	All bool
}

// empty reports whether f narrows nothing.
func (f Filter) empty() bool {
	return f.IDs == nil && f.Topic == "" && f.AggregateID == "" && f.Type == "" && f.Since.IsZero() && f.Until.IsZero()
}

// bind is f as the dead-letter statements' filters, whose Filters picks
// the form of the statements that select its rows.
func (f Filter) bind() outboxsql.DeadArgs {
	return outboxsql.DeadArgs{IDs: f.IDs, Topic: f.Topic, Aggregate: f.AggregateID, EventType: f.Type, Since: f.Since, Until: f.Until}
}

// DeadPageDefault is the page size ListDead uses when limit is zero;
// DeadPageMax the largest it accepts.
const (
	DeadPageDefault = 50
	DeadPageMax     = 10000
)

// ListDead returns up to limit dead events matching f with ids above after,
// in id order (keyset paging: pass the last ID of a page as the next
// after). A zero Filter lists every dead event. Payloads are not read.
// It reads its page on the index of one of f's filters (schema version 6),
// or, led by ids, a type or a time window, the rows that filter selects,
// however many dead events are kept.
func (a *Admin) ListDead(ctx context.Context, f Filter, after int64, limit int) ([]Row, error) {
	if err := a.CheckSchema(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	if limit == 0 {
		limit = DeadPageDefault
	}
	if limit < 0 || limit > DeadPageMax {
		return nil, fmt.Errorf("outboxadmin: list dead events: limit %d is outside 1..%d", limit, DeadPageMax)
	}
	args := outboxsql.DeadListArgs{DeadArgs: f.bind(), After: after, Limit: limit}
	out, err := queryRows(ctx, a.db, a.sql.deadList[args.Filters()], args.Args()...)
	if err != nil {
		return nil, fmt.Errorf("outboxadmin: list dead events: %w", err)
	}
	return out, nil
}

// CountDeadMax is the most dead events CountDead counts.
const CountDeadMax = 100_000

// CountDead counts the dead events matching f (a zero Filter: every dead
// event) up to CountDeadMax: a result of CountDeadMax means at least that
// many. It reads at most CountDeadMax entries of the leading filter's
// index, however many dead events are kept.
func (a *Admin) CountDead(ctx context.Context, f Filter) (int64, error) {
	if err := a.CheckSchema(ctx); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	var n int64
	args := outboxsql.DeadCountArgs{DeadArgs: f.bind(), Cap: CountDeadMax}
	if err := a.db.QueryRowContext(ctx, a.sql.deadCount[args.Filters()], args.Args()...).Scan(&n); err != nil {
		return 0, fmt.Errorf("outboxadmin: count dead events: %w", err)
	}
	return n, nil
}

// Event reads the row id in any state, with its payload. It returns
// ErrNotFound when there is none.
func (a *Admin) Event(ctx context.Context, id int64) (Row, error) {
	if err := a.CheckSchema(ctx); err != nil {
		return Row{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	var payload []byte
	r, err := scanRow(a.db.QueryRowContext(ctx, a.sql.row, id), &payload)
	if errors.Is(err, sql.ErrNoRows) {
		return Row{}, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return Row{}, fmt.Errorf("outboxadmin: read event %d: %w", id, err)
	}
	r.Payload = payload
	return r, nil
}

// Retried is one dead event Retry returned to pending.
type Retried struct {
	Row
	// Overtaken lists the row ids of later events of the same aggregate
	// that a relay had already claimed when the retry committed. They are
	// in flight and may reach the broker before this event; every later
	// event still pending goes after it.
	Overtaken []int64
}

// Retry returns the dead events f selects to pending, due at once, with
// their attempts reset to zero; last_error is kept until the relay
// publishes the event or records a new failure. With dryRun it returns the
// same result and changes nothing.
//
// Order: a retried row has a lower id than the later events of its
// aggregate, and the relay claims in id order per aggregate, so it is
// published before every later event of its aggregate that is still
// pending. Retry holds the relays' claims back while it commits (a claim in
// progress finishes first), so no claim sees the aggregate's later rows
// without the retried one; the ones already claimed (in flight) are
// reported in Overtaken.
// Retried rows wake the relays (NOTIFY) when the retry commits.
//
// While a WAL relay's slot streams the table, Retry changes nothing and
// returns ErrWALStreamed.
func (a *Admin) Retry(ctx context.Context, f Filter, dryRun bool) ([]Retried, error) {
	if f.empty() && !f.All {
		return nil, ErrNoSelection
	}
	if err := a.CheckSchema(ctx); err != nil {
		return nil, err
	}
	var out []Retried
	err := a.inTx(ctx, dryRun, func(tx *sql.Tx) error {
		if err := a.refuseWhileStreamed(ctx, tx); err != nil {
			return err
		}
		dead, err := lockDead(ctx, tx, &a.sql.deadLock, f.bind())
		if err != nil || len(dead) == 0 {
			return err
		}
		aggregates := make([]string, 0, len(dead))
		seen := map[string]bool{}
		ids := make([]int64, len(dead))
		for i, r := range dead {
			ids[i] = r.ID
			if !seen[r.AggregateID] {
				seen[r.AggregateID] = true
				aggregates = append(aggregates, r.AggregateID)
			}
		}
		if !dryRun {
			// No claim runs from here to the commit: each sees the
			// retry whole or not at all (see outboxsql.OpsClaimGate),
			// and the rows in flight found next are all there are.
			if _, err := tx.ExecContext(ctx, a.sql.claimGate); err != nil {
				return fmt.Errorf("hold claims back: %w", err)
			}
		}
		claimed, err := lockClaimed(ctx, tx, a.sql.lockUnpublished, aggregates)
		if err != nil {
			return err
		}
		for _, r := range dead {
			rt := Retried{Row: r}
			for _, c := range claimed[r.AggregateID] {
				if c > r.ID {
					rt.Overtaken = append(rt.Overtaken, c)
				}
			}
			out = append(out, rt)
		}
		if _, err := tx.ExecContext(ctx, a.sql.retry, outboxsql.Int64Array(ids)); err != nil {
			return fmt.Errorf("reset to pending: %w", err)
		}
		if _, err := tx.ExecContext(ctx, a.sql.lowerFloor, outboxsql.Int64Array(ids)); err != nil {
			return fmt.Errorf("lower the claim floor: %w", err)
		}
		if _, err := tx.ExecContext(ctx, a.sql.wake); err != nil {
			return fmt.Errorf("notify relays: %w", err)
		}
		return nil
	})
	if errors.Is(err, ErrNotDead) || errors.Is(err, ErrWALStreamed) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("outboxadmin: retry dead events: %w", err)
	}
	return out, nil
}

// querier is what refuseWhileStreamed runs its statements on: a
// transaction, or the pool for a dry run that opens none.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// refuseWhileStreamed returns ErrWALStreamed while a WAL relay's slot may
// stream the table. In a transaction it first takes the WAL gate (see
// outboxsql.OpsWALGate), so a slot created after the check sees the
// transaction's rows as pending when it is made; it must run before the
// transaction takes any row lock.
func (a *Admin) refuseWhileStreamed(ctx context.Context, q querier) error {
	if _, ok := q.(*sql.Tx); ok {
		if _, err := q.ExecContext(ctx, a.sql.walGate, a.sql.table); err != nil {
			return fmt.Errorf("take the WAL gate: %w", err)
		}
	}
	var slots string
	if err := q.QueryRowContext(ctx, a.sql.walSlots, outboxsql.WALSlotsArgs{Table: a.sql.table, Slot: a.slotName()}.Args()...).Scan(&slots); err != nil {
		return fmt.Errorf("look for WAL relays' slots: %w", err)
	}
	if slots != "" {
		return fmt.Errorf("%w (slot %s): run `outbox wal takeover` first", ErrWALStreamed, slots)
	}
	return nil
}

// Drop deletes the dead events f selects and returns them. With dryRun it
// returns them and deletes nothing.
func (a *Admin) Drop(ctx context.Context, f Filter, dryRun bool) ([]Row, error) {
	if f.empty() && !f.All {
		return nil, ErrNoSelection
	}
	if err := a.CheckSchema(ctx); err != nil {
		return nil, err
	}
	var out []Row
	err := a.inTx(ctx, dryRun, func(tx *sql.Tx) error {
		dead, err := lockDead(ctx, tx, &a.sql.deadLock, f.bind())
		if err != nil || len(dead) == 0 {
			return err
		}
		ids := make([]int64, len(dead))
		for i, r := range dead {
			ids[i] = r.ID
		}
		res, err := tx.ExecContext(ctx, a.sql.drop, outboxsql.Int64Array(ids))
		if err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		// The rows are locked, so this cannot happen short of a bug; a
		// report that overstated the deletion would be worse than an error.
		if n, err := res.RowsAffected(); err != nil || n != int64(len(ids)) {
			return fmt.Errorf("delete: %d of %d rows deleted (%v)", n, len(ids), err)
		}
		out = dead
		return nil
	})
	if errors.Is(err, ErrNotDead) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("outboxadmin: drop dead events: %w", err)
	}
	return out, nil
}

// inTx runs fn in a transaction, committed unless dryRun (then rolled
// back, so a dry run takes the same locks and sees the same rows).
func (a *Admin) inTx(ctx context.Context, dryRun bool, fn func(*sql.Tx) error) error {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, a.sql.timeouts, outboxsql.TimeoutArgs{Timeout: a.cfg.StatementTimeout}.Args()...); err != nil {
		return fmt.Errorf("set timeouts: %w", err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	if dryRun {
		return nil
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// lockDead locks the dead rows f selects, failing with ErrNotDead if an id
// of f.IDs is not among them.
func lockDead(ctx context.Context, tx *sql.Tx, forms *[outboxsql.DeadForms]string, f outboxsql.DeadArgs) ([]Row, error) {
	out, err := queryRows(ctx, tx, forms[f.Filters()], f.Args()...)
	if err != nil {
		return nil, fmt.Errorf("select: %w", err)
	}
	if missing := missingIDs(f.IDs, out); len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotDead, joinIDs(missing))
	}
	return out, nil
}

func missingIDs(want []int64, got []Row) []int64 {
	found := make(map[int64]bool, len(got))
	for _, r := range got {
		found[r.ID] = true
	}
	var missing []int64
	for _, id := range want {
		if !found[id] {
			missing = append(missing, id)
		}
	}
	return missing
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ", ")
}

// lockClaimed locks the unpublished rows of the aggregates and returns the
// ids of those claimed, per aggregate.
func lockClaimed(ctx context.Context, tx *sql.Tx, query string, aggregates []string) (map[string][]int64, error) {
	rows, err := tx.QueryContext(ctx, query, outboxsql.TextArray(aggregates))
	if err != nil {
		return nil, fmt.Errorf("lock later events: %w", err)
	}
	defer rows.Close()
	claimed := map[string][]int64{}
	for rows.Next() {
		var (
			id         int64
			agg, state string
		)
		if err := rows.Scan(&id, &agg, &state); err != nil {
			return nil, fmt.Errorf("lock later events: %w", err)
		}
		if state == "claimed" {
			claimed[agg] = append(claimed[agg], id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lock later events: %w", err)
	}
	return claimed, nil
}
