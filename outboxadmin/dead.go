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
	out, err := a.db.deadList(ctx, f.bind(), after, limit)
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
	n, err := a.db.deadCount(ctx, f.bind(), CountDeadMax)
	if err != nil {
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
	r, err := a.db.row(ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		return Row{}, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return Row{}, fmt.Errorf("outboxadmin: read event %d: %w", id, err)
	}
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
// Retried rows wake the relays (NOTIFY) when the retry commits; on MySQL,
// which has no NOTIFY, the relays find them at their next poll.
//
// While a WAL relay's slot streams the table, Retry changes nothing and
// returns ErrWALStreamed (never on MySQL, which has no WAL relay).
func (a *Admin) Retry(ctx context.Context, f Filter, dryRun bool) ([]Retried, error) {
	if f.empty() && !f.All {
		return nil, ErrNoSelection
	}
	if err := a.CheckSchema(ctx); err != nil {
		return nil, err
	}
	var out []Retried
	err := a.db.inTx(ctx, a.cfg.StatementTimeout, !dryRun, func(tx opTx) error {
		out = nil // inTx may run this again (a deadlock's victim)
		if err := refuseWhileStreamed(tx.walSlots(ctx)); err != nil {
			return err
		}
		dead, err := lockDead(ctx, tx, f.bind())
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
			if err := tx.claimGate(ctx); err != nil {
				return fmt.Errorf("hold claims back: %w", err)
			}
		}
		claimed, err := tx.lockUnpublished(ctx, aggregates)
		if err != nil {
			return fmt.Errorf("lock later events: %w", err)
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
		// The rows are locked, so a shortfall cannot happen short of a
		// bug; a report that overstated the retry would be worse than an
		// error.
		n, err := tx.retry(ctx, ids)
		if err != nil {
			return fmt.Errorf("reset to pending: %w", err)
		}
		if n != int64(len(ids)) {
			return fmt.Errorf("reset to pending: %d of %d rows reset", n, len(ids))
		}
		if dryRun {
			// The claim floor is the claim gate's row on MySQL: a dry
			// run, which holds claims back nowhere, leaves it alone.
			return nil
		}
		if err := tx.lowerFloor(ctx, ids); err != nil {
			return fmt.Errorf("lower the claim floor: %w", err)
		}
		if err := tx.wake(ctx); err != nil {
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

// refuseWhileStreamed returns ErrWALStreamed while a WAL relay's slot may
// stream the table: slots are those adminDB.walSlots or, in a
// transaction, opTx.walSlots found (the latter after taking the WAL gate,
// so a slot created after the check sees the transaction's rows as
// pending when it is made: it runs before the transaction takes any row
// lock).
func refuseWhileStreamed(slots string, err error) error {
	if err != nil {
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
	err := a.db.inTx(ctx, a.cfg.StatementTimeout, !dryRun, func(tx opTx) error {
		out = nil // inTx may run this again (a deadlock's victim)
		dead, err := lockDead(ctx, tx, f.bind())
		if err != nil || len(dead) == 0 {
			return err
		}
		ids := make([]int64, len(dead))
		for i, r := range dead {
			ids[i] = r.ID
		}
		// The rows are locked, so a shortfall cannot happen short of a
		// bug; a report that overstated the deletion would be worse than
		// an error.
		n, err := tx.drop(ctx, ids)
		if err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		if n != int64(len(ids)) {
			return fmt.Errorf("delete: %d of %d rows deleted", n, len(ids))
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

// lockDead locks the dead rows f selects, failing with ErrNotDead if an id
// of f.IDs is not among them.
func lockDead(ctx context.Context, tx opTx, f outboxsql.DeadArgs) ([]Row, error) {
	out, err := tx.lockDead(ctx, f)
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
