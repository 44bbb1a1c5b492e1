package relaytest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/human"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/outboxtest"
	"github.com/txoutbox/txoutbox/relay"
)

// DrainTimeoutDefault bounds Drain when its ctx has no deadline.
const DrainTimeoutDefault = 30 * time.Second

// drainCheckInterval is how often Drain looks whether the outbox is
// drained: a count of the unpublished rows, on a test's small table.
const drainCheckInterval = 5 * time.Millisecond

// What Drain gives the relay's Config fields left zero, for tests: a
// failed event is retried within milliseconds instead of seconds.
const (
	drainPollInterval     = 10 * time.Millisecond
	drainBackoffMin       = time.Millisecond
	drainBackoffMax       = 20 * time.Millisecond
	drainOutageBackoffMax = 20 * time.Millisecond
)

// readTimeout bounds Drain's reads of the outbox once the relay stopped.
const readTimeout = 10 * time.Second

// ErrDead is matched by Drain's error when events went dead while it ran.
var ErrDead = errors.New("relaytest: events went dead")

// ErrNotDrained is matched by Drain's error when events were still
// unpublished at its deadline, or could not be published before it.
var ErrNotDrained = errors.New("relaytest: the outbox was not drained")

// ErrScheduled is matched by Drain's error, besides ErrNotDrained, when
// all that is left unpublished is events whose NotBefore comes after its
// deadline and the events of their aggregates held behind them. Drain
// returns it as soon as nothing else is left, rather than at its
// deadline. A test that writes such an event on purpose (a reminder a
// day ahead) checks for it, or drains with WithClock.
var ErrScheduled = errors.New("relaytest: events are scheduled after the drain's deadline")

// A DrainOption changes what Drain does: see WithClock.
type DrainOption func(*drainOptions)

type drainOptions struct {
	clock func() time.Time
}

// WithClock has Drain publish the events whose NotBefore is no later than
// now(), as if that time had come, for code under test that writes delayed
// events by a clock of its own: with a fake clock set a day ahead, a
// reminder written for tomorrow is published at once. Drain makes such
// events due in the outbox when it starts and each time it looks (it moves
// the retry time the relay reads, and leaves NotBefore as written, so
// outboxtest still shows it); it waits for the others only if their
// NotBefore comes before its deadline.
func WithClock(now func() time.Time) DrainOption {
	return func(o *drainOptions) { o.clock = now }
}

// Drain runs a relay on db and pub until the outbox holds no unpublished
// event, every event the relay published marked published (or dead), then
// stops it cleanly and returns: a test calls it instead of sleeping, and
// asserts on pub (a Publisher) and the outbox afterwards.
//
// cfg is the relay's Config, with test defaults for the fields left zero:
// PollInterval 10ms, BackoffMin 1ms, BackoffMax (at least BackoffMin) and
// OutageBackoffMax 20ms, so a failed event is retried within milliseconds,
// no pruning (Retention -1, so published rows stay to assert on) and no
// logs. Events that become due only later are
// waited for, if they come due before its deadline: a failure's backoff,
// and an event whose NotBefore comes before the deadline (by the database
// clock; see WithClock for events delayed further). Events written while
// it runs may or may not be published.
//
// It returns an error matching ErrDead, listing them, if events went dead
// meanwhile (a Failure with Permanent, after cfg.MaxAttempts), and one
// matching ErrNotDrained, listing what is left, each event with why it is
// not published (its last error, its NotBefore, the earlier event of its
// aggregate it is held behind), if events are still unpublished when ctx
// ends or, if ctx has no deadline, after DrainTimeoutDefault (a Failure
// that never ends, as an outage). When all that is left is events
// scheduled after the deadline, and events held behind them, it returns at
// once an error matching ErrScheduled too. An invalid cfg is relay.New's
// error.
//
// db is a PostgreSQL or a MySQL/MariaDB database, told apart as
// txoutbox.DetectDialect does; Drain, its errors and WithClock are the
// same on both.
func Drain(ctx context.Context, db *sql.DB, pub message.Publisher, cfg relay.Config, opts ...DrainOption) error {
	setDefaults(&cfg)
	if db == nil {
		return fmt.Errorf("%w: db is nil", relay.ErrInvalidConfig)
	}
	var o drainOptions
	for _, opt := range opts {
		opt(&o)
	}
	r, err := relay.New(db, pub, cfg)
	if err != nil {
		return err
	}
	dialect, err := txoutbox.DetectDialect(ctx, db)
	if err != nil {
		return fmt.Errorf("%w: %w", relay.ErrInvalidConfig, err)
	}
	names, err := outboxsql.NamesForDialect(outboxsql.Dialect(dialect), cfg.Table.Schema, cfg.Table.Name)
	if err != nil {
		return fmt.Errorf("%w: %w", relay.ErrInvalidConfig, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DrainTimeoutDefault)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	w := waiter{db: db, table: cfg.Table, names: names, mysql: dialect == txoutbox.MySQL, deadline: deadline, clock: o.clock}
	q := outboxtest.InTable(db, cfg.Table)
	dead, err := deadEvents(ctx, db, q, cfg.Table, nil)
	if err != nil {
		return err
	}
	deadBefore := seqs(dead)

	// The relay stops when Drain says, not when ctx ends: Drain still
	// reads the outbox then, to say what is left.
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	ended, waitErr := w.wait(ctx, done)
	stop()
	if runErr := <-done; runErr != nil && waitErr == nil {
		waitErr = runErr
	}
	if waitErr != nil {
		return fmt.Errorf("relaytest: drain: %w", waitErr)
	}

	// Read what is left on a context of its own: ctx may have ended.
	readCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
	defer cancel()
	dead, err = deadEvents(readCtx, db, q, cfg.Table, deadBefore)
	if err != nil {
		return err
	}
	if ended != drained {
		cause := ctx.Err()
		if ended == scheduledOnly {
			cause = fmt.Errorf("all scheduled after the deadline %s, or held behind such an event", deadline.UTC().Format(time.RFC3339Nano))
		}
		return w.notDrained(readCtx, q, cause, dead)
	}
	if len(dead) > 0 {
		return drainError{fmt.Sprintf("%v: %d:\n%s", ErrDead, len(dead), list(dead, nil)), []error{ErrDead}}
	}
	return nil
}

func setDefaults(cfg *relay.Config) {
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&cfg.PollInterval, drainPollInterval)
	set(&cfg.BackoffMin, drainBackoffMin)
	set(&cfg.BackoffMax, max(drainBackoffMax, cfg.BackoffMin))
	set(&cfg.OutageBackoffMax, drainOutageBackoffMax)
	set(&cfg.Retention, -1)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
}

// waiter watches the outbox for Drain.
type waiter struct {
	db       *sql.DB
	table    txoutbox.Table
	names    outboxsql.Names
	mysql    bool // the outbox is MySQL's: its statements are outboxsql.MySQLTest*
	deadline time.Time
	clock    func() time.Time // WithClock's, or nil
}

// outcome is what a look at the outbox found, and how a wait ended.
type outcome int

const (
	waiting       outcome = iota // rows are left that may be published before the deadline
	timedOut                     // ctx ended
	drained                      // no unpublished row is left
	scheduledOnly                // what is left cannot be published before the deadline
)

// wait reports when the outbox holds no unpublished row, or only rows
// that cannot be published before the deadline, or ctx ends first. It
// checks before the relay claimed anything too: an outbox drained already
// returns at once.
func (w waiter) wait(ctx context.Context, done <-chan error) (outcome, error) {
	t := time.NewTicker(drainCheckInterval)
	defer t.Stop()
	for {
		o, err := w.check(ctx)
		switch {
		case err == nil && o != waiting:
			return o, nil
		case ctx.Err() != nil:
			return timedOut, nil
		case err != nil:
			return timedOut, err
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return timedOut, nil
		case err := <-done:
			return timedOut, fmt.Errorf("the relay stopped: %v", err)
		}
	}
}

// check looks at the outbox once: waiting, drained or scheduledOnly. Only
// while events are scheduled does it make those the clock has reached due
// (WithClock) and look for a row that may still be published before the
// deadline.
func (w waiter) check(ctx context.Context) (outcome, error) {
	s, err := txoutbox.ReadStats(ctx, w.db, w.table)
	switch {
	case err != nil:
		return waiting, err
	case s.Backlog == 0 && s.Scheduled == 0:
		return drained, nil
	case s.Scheduled == 0:
		return waiting, nil
	}
	if w.clock != nil {
		query, args := outboxsql.TestAdvance, outboxsql.TestDrainArgs{Time: w.clock()}.Args()
		if w.mysql {
			query, args = outboxsql.MySQLTestAdvance, outboxsql.MySQLTestDrainArgs{Time: w.clock()}.Args()
		}
		if _, err := w.db.ExecContext(ctx, w.names.Render(query), args...); err != nil {
			return waiting, fmt.Errorf("make the events due by the clock: %w", err)
		}
	}
	left, err := w.left(ctx)
	switch {
	case err != nil || left.drainable:
		return waiting, err
	case !left.any: // published since the stats were read
		return drained, nil
	}
	return scheduledOnly, nil
}

// leftRows is what left reads.
type leftRows struct {
	any       bool      // an unpublished row is left
	drainable bool      // one of them may be published before the deadline
	now       time.Time // the database clock
}

// left reads whether unpublished rows are left, and whether any of them
// may still be published before the deadline.
func (w waiter) left(ctx context.Context) (leftRows, error) {
	var l leftRows
	if w.mysql {
		var now outboxsql.MySQLTime // the DSN need not say parseTime=true
		err := w.db.QueryRowContext(ctx, w.names.Render(outboxsql.MySQLTestDrainable), outboxsql.MySQLTestDrainArgs{Time: w.deadline, Drainable: true}.Args()...).
			Scan(&l.any, &l.drainable, &now)
		if err != nil {
			return leftRows{}, fmt.Errorf("look for events to wait for: %w", err)
		}
		l.now = now.Time
		return l, nil
	}
	err := w.db.QueryRowContext(ctx, w.names.Render(outboxsql.TestDrainable), outboxsql.TestDrainArgs{Time: w.deadline}.Args()...).
		Scan(&l.any, &l.drainable, &l.now)
	if err != nil {
		return leftRows{}, fmt.Errorf("look for events to wait for: %w", err)
	}
	return l, nil
}

// deadEvents returns the dead events of the outbox, but those whose Seq
// is in before, reading the table only if its stats count dead rows.
func deadEvents(ctx context.Context, db *sql.DB, q outboxtest.Querier, table txoutbox.Table, before map[int64]bool) ([]outboxtest.Event, error) {
	s, err := txoutbox.ReadStats(ctx, db, table)
	if err != nil {
		return nil, fmt.Errorf("relaytest: drain: %w", err)
	}
	if s.Dead == 0 {
		return nil, nil
	}
	events, err := outboxtest.ReadEvents(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("relaytest: drain: %w", err)
	}
	var dead []outboxtest.Event
	for _, e := range events {
		if e.State == outboxtest.StateDead && !before[e.Seq] {
			dead = append(dead, e)
		}
	}
	return dead, nil
}

func seqs(events []outboxtest.Event) map[int64]bool {
	m := make(map[int64]bool, len(events))
	for _, e := range events {
		m[e.Seq] = true
	}
	return m
}

// notDrained is the error of a drain that ran out of time, or stopped
// with only events scheduled after its deadline left: what is left
// unpublished, each with why, and what went dead.
func (w waiter) notDrained(ctx context.Context, q outboxtest.Querier, cause error, dead []outboxtest.Event) error {
	events, err := outboxtest.ReadEvents(ctx, q)
	if err != nil {
		return fmt.Errorf("%w (%v), and reading what is left failed: %w", ErrNotDrained, cause, err)
	}
	l, err := w.left(ctx)
	if err != nil {
		return fmt.Errorf("%w (%v), and reading what is left failed: %w", ErrNotDrained, cause, err)
	}
	var left []outboxtest.Event
	for _, e := range events {
		if e.State == outboxtest.StatePending {
			left = append(left, e)
		}
	}
	why, later := w.whyLeft(left, l.now)
	msg := fmt.Sprintf("%v: %d events unpublished (%v):\n%s", ErrNotDrained, len(left), cause, list(left, why))
	is := []error{ErrNotDrained}
	if later {
		is = append(is, ErrScheduled)
	}
	if len(dead) > 0 {
		msg += fmt.Sprintf("\nand %d went dead:\n%s", len(dead), list(dead, nil))
		is = append(is, ErrDead)
	}
	return drainError{msg, is}
}

// whyLeft says why each event of left (the unpublished ones, in the order
// written) is not published, by the database clock now: scheduled for
// later, or held behind an earlier event of its aggregate that is
// scheduled or failed, or nothing more than its last error. later is
// whether every one of them is scheduled after the deadline or held behind
// such an event (ErrScheduled).
func (w waiter) whyLeft(left []outboxtest.Event, now time.Time) (why []string, later bool) {
	why = make([]string, len(left))
	later = len(left) > 0
	type holder struct {
		e     outboxtest.Event
		why   string
		later bool // scheduled after the deadline
	}
	holders := map[string]holder{} // aggregate id: its first event scheduled or failed
	for i, e := range left {
		if h, ok := holders[e.AggregateID]; ok {
			why[i] = fmt.Sprintf("held behind #%d, %s", h.e.Seq, h.why)
			later = later && h.later
			continue
		}
		switch {
		case e.NotBefore.After(now):
			afterDeadline := e.NotBefore.After(w.deadline)
			advanced := w.clock != nil && !e.NotBefore.After(w.clock())
			why[i] = fmt.Sprintf("scheduled for %s (in %s", e.NotBefore.UTC().Format(time.RFC3339Nano), human.Duration(e.NotBefore.Sub(now)))
			switch {
			case advanced:
				why[i] += ", made due by the clock of WithClock)"
			case afterDeadline:
				why[i] += ", after the deadline)"
			default:
				why[i] += ", before the deadline)"
			}
			holders[e.AggregateID] = holder{e, why[i], afterDeadline && !advanced}
			later = later && afterDeadline && !advanced
		case e.Attempts > 0:
			why[i] = "failed, to be retried"
			holders[e.AggregateID] = holder{e, "which failed", false}
			later = false
		default:
			why[i] = "due"
			later = false
		}
	}
	return why, later
}

// drainError is a message of its own matching sentinels.
type drainError struct {
	msg string
	is  []error
}

func (e drainError) Error() string   { return e.msg }
func (e drainError) Unwrap() []error { return e.is }

// shownEvents is the most events an error lists.
const shownEvents = 20

// list is events one a line, each with its last error and, if why is not
// nil, why it is not published.
func list(events []outboxtest.Event, why []string) string {
	return human.List(len(events), shownEvents, func(i int) string {
		e := events[i]
		line := e.String()
		if e.LastError != "" {
			line += ": " + e.LastError
		}
		if why != nil && why[i] != "" {
			line += "  ← " + why[i]
		}
		return line
	})
}
