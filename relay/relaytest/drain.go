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
	"github.com/txoutbox/txoutbox/outboxtest"
	"github.com/txoutbox/txoutbox/relay"
)

// DrainTimeoutDefault bounds Drain when its ctx has no deadline.
const DrainTimeoutDefault = 30 * time.Second

// drainCheckInterval is how often Drain looks whether the outbox is
// drained: a count of the unpublished rows, on a test's small table.
const drainCheckInterval = 5 * time.Millisecond

// Defaults Drain gives the relay's Config fields left zero, for tests: a
// failed event is retried within milliseconds instead of seconds.
const (
	PollIntervalDefault     = 10 * time.Millisecond
	BackoffMinDefault       = time.Millisecond
	BackoffMaxDefault       = 20 * time.Millisecond
	OutageBackoffMaxDefault = 20 * time.Millisecond
)

// ErrDead is matched by Drain's error when events went dead while it ran.
var ErrDead = errors.New("relaytest: events went dead")

// ErrNotDrained is matched by Drain's error when events were still
// unpublished at its deadline.
var ErrNotDrained = errors.New("relaytest: the outbox was not drained")

// Drain runs a relay on db and pub until the outbox holds no unpublished
// event, every event the relay published marked published (or dead), then
// stops it cleanly and returns: a test calls it instead of sleeping, and
// asserts on pub (a Publisher) and the outbox afterwards.
//
// cfg is the relay's Config, with test defaults for the fields left zero:
// PollIntervalDefault, BackoffMinDefault, BackoffMaxDefault,
// OutageBackoffMaxDefault, no pruning (Retention -1, so published rows
// stay to assert on) and no logs. Events that become due only later (a
// failure's backoff) are waited for; events written while it runs may
// or may not be published.
//
// It returns an error matching ErrDead, listing them, if events went dead
// meanwhile (a Failure with Permanent, after cfg.MaxAttempts), and one
// matching ErrNotDrained, listing what is left and its last errors, if
// events are still unpublished when ctx ends or, if ctx has no deadline,
// after DrainTimeoutDefault (a Failure that never ends, as an outage).
// An invalid cfg is relay.New's error.
func Drain(ctx context.Context, db *sql.DB, pub message.Publisher, cfg relay.Config) error {
	setDefaults(&cfg)
	if db == nil {
		return fmt.Errorf("%w: db is nil", relay.ErrInvalidConfig)
	}
	r, err := relay.New(db, pub, cfg)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DrainTimeoutDefault)
		defer cancel()
	}
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
	drained, waitErr := waitDrained(ctx, db, cfg.Table, done)
	stop()
	if runErr := <-done; runErr != nil && waitErr == nil {
		waitErr = runErr
	}
	if waitErr != nil {
		return fmt.Errorf("relaytest: drain: %w", waitErr)
	}

	// Read what is left on a context of its own: ctx may have ended.
	readCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outboxtest.ReadTimeout)
	defer cancel()
	dead, err = deadEvents(readCtx, db, q, cfg.Table, deadBefore)
	if err != nil {
		return err
	}
	if !drained {
		return notDrained(readCtx, q, ctx.Err(), dead)
	}
	if len(dead) > 0 {
		return drainError{fmt.Sprintf("%v: %d:\n%s", ErrDead, len(dead), list(dead)), ErrDead}
	}
	return nil
}

func setDefaults(cfg *relay.Config) {
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&cfg.PollInterval, PollIntervalDefault)
	set(&cfg.BackoffMin, BackoffMinDefault)
	set(&cfg.BackoffMax, max(BackoffMaxDefault, cfg.BackoffMin))
	set(&cfg.OutageBackoffMax, OutageBackoffMaxDefault)
	set(&cfg.Retention, -1)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
}

// waitDrained reports when the outbox holds no unpublished row, or false
// when ctx ends first. It checks before the relay claimed anything too: an
// outbox drained already returns at once.
func waitDrained(ctx context.Context, db *sql.DB, table txoutbox.Table, done <-chan error) (bool, error) {
	t := time.NewTicker(drainCheckInterval)
	defer t.Stop()
	for {
		s, err := txoutbox.ReadStats(ctx, db, table)
		switch {
		case err == nil && s.Backlog == 0:
			return true, nil
		case ctx.Err() != nil:
			return false, nil
		case err != nil:
			return false, err
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return false, nil
		case err := <-done:
			return false, fmt.Errorf("the relay stopped: %v", err)
		}
	}
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

// notDrained is the error of a drain that ran out of time: what is left
// unpublished, with its last errors, and what went dead.
func notDrained(ctx context.Context, q outboxtest.Querier, cause error, dead []outboxtest.Event) error {
	events, err := outboxtest.ReadEvents(ctx, q)
	if err != nil {
		return fmt.Errorf("%w (%v), and reading what is left failed: %w", ErrNotDrained, cause, err)
	}
	var left []outboxtest.Event
	for _, e := range events {
		if e.State == outboxtest.StatePending {
			left = append(left, e)
		}
	}
	msg := fmt.Sprintf("%v: %d events unpublished (%v):\n%s", ErrNotDrained, len(left), cause, list(left))
	if len(dead) > 0 {
		msg += fmt.Sprintf("\nand %d went dead:\n%s", len(dead), list(dead))
		return fmt.Errorf("%w; %w", drainError{msg, ErrNotDrained}, ErrDead)
	}
	return drainError{msg, ErrNotDrained}
}

// drainError is a message of its own matching a sentinel.
type drainError struct {
	msg string
	is  error
}

func (e drainError) Error() string { return e.msg }
func (e drainError) Unwrap() error { return e.is }

// shownEvents is the most events an error lists.
const shownEvents = 20

// list is events one a line, each with its last error.
func list(events []outboxtest.Event) string {
	return human.List(len(events), shownEvents, func(i int) string {
		e := events[i]
		if e.LastError != "" {
			return e.String() + ": " + e.LastError
		}
		return e.String()
	})
}
