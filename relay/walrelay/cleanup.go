package walrelay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// cleanup removes the rows of published events from the table without
// touching a row per event as it is published. Rows carry no commit
// position, and ids are assigned before commit, so "every id up to the
// highest confirmed" would be wrong: a lower id may commit later. A round
// instead proves a bound:
//
//  1. It notes the highest id H in the table and the next transaction id
//     X (pg_current_snapshot's xmax).
//  2. It waits until every transaction below X has ended (the snapshot's
//     xmin reaches X): every row with an id up to H has now committed or
//     rolled back, and it notes the WAL position L then.
//  3. Once the relay has confirmed the slot up to L, every committed row
//     up to H was published (or is dead), and it deletes them, or with a
//     Retention marks them published, CleanupBatch rows per statement.
//
// A transaction takes a row id (nextval) before it has a transaction id
// if the insert is its first write, so a row up to H may come from a
// transaction at or above X that commits after L: step 3 leaves rows whose
// xmin is not below X to a later round.
//
// Before it starts a round and again right before it removes rows, it
// checks the publication (publication.check) and that its
// fingerprint is the one the session started with: what the slot has
// confirmed proves the rows published only if the publication carried
// every insert all along. When it finds otherwise it removes nothing,
// clears the relay's marker (publication.disown, so the next relay republishes the table's
// unpublished rows) and ends the session through failed.
//
// A round takes two CleanupIntervals when nothing holds a transaction
// open; a long transaction anywhere on the server delays it, never makes
// it wrong. Rows the slot has not confirmed stay, so the polling relay can
// take over from the table (`outbox wal takeover`).
type cleanup struct {
	cleanupDeps
	failed chan error // the publication changed: the session must end

	started bool   // a round is in progress
	maxID   int64  // H
	xmax    int64  // X
	lsn     uint64 // L, 0 until step 2 passed
}

// cleanupDeps is what a session's cleanup removes rows with, and what it
// is told of the stream.
type cleanupDeps struct {
	pool        *pgxpool.Pool
	sql         *statements
	log         *slog.Logger
	pub         publication
	srv         serverFacts
	fingerprint string          // the publication's when the session took the slot
	confirmed   *atomic.Uint64  // the position the stream has settled up to
	settled     *highestSettled // raised by the rows marked published
	interval    time.Duration   // Config.CleanupInterval
	timeout     time.Duration   // Config.StatementTimeout
	retention   time.Duration   // Config.Retention
	batch       int             // Config.CleanupBatch
}

func newCleanup(d cleanupDeps) *cleanup {
	return &cleanup{cleanupDeps: d, failed: make(chan error, 1)}
}

func (c *cleanup) run(ctx context.Context) {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := c.step(ctx)
			var changed *publicationChanged
			switch {
			case err == nil, ctx.Err() != nil:
			case errors.Is(err, ErrPublication), errors.As(err, &changed):
				c.log.Error("the publication changed: removing nothing, stopping the stream", "err", err)
				c.pub.disown(ctx, c.pool)
				c.failed <- err
				return
			default:
				c.log.Warn("cleanup failed; trying again", "err", err)
				c.started = false
			}
		}
	}
}

// step advances the round by what can be done now.
func (c *cleanup) step(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if !c.started {
		if err := c.checkPublication(ctx); err != nil {
			return err
		}
		if err := c.pool.QueryRow(sctx, c.sql.horizon).Scan(&c.maxID, &c.xmax); err != nil {
			return fmt.Errorf("start a cleanup round: %w", err)
		}
		c.started, c.lsn = true, 0
		return nil
	}
	if c.lsn == 0 {
		var (
			passed bool
			lsn    string
		)
		if err := c.pool.QueryRow(sctx, c.sql.horizonPassed, c.xmax).Scan(&passed, &lsn); err != nil {
			return fmt.Errorf("cleanup: %w", err)
		}
		if !passed {
			return nil
		}
		l, err := pglogrepl.ParseLSN(lsn)
		if err != nil {
			return fmt.Errorf("cleanup: %w", err)
		}
		c.lsn = uint64(l)
	}
	if c.confirmed.Load() < c.lsn {
		return nil
	}
	if err := c.checkPublication(ctx); err != nil {
		return err
	}
	if _, err := c.remove(ctx, c.maxID, c.xmax); err != nil {
		return err
	}
	c.started = false
	if c.retention >= 0 {
		// With Retention zero this deletes the rows marked published
		// (by the slot's setup, or by the polling relay before).
		return c.prune(ctx)
	}
	return nil
}

// remove deletes, or marks published, the unpublished rows with ids up to
// maxID, in batches that each start where the last ended. The first batch
// starts at the lowest unpublished id, looked up on the claim index each
// round: a row an earlier round could not see yet (its transaction took
// its id before that round and committed after it) is below where that
// round ended, and must not be passed over for good.
func (c *cleanup) remove(ctx context.Context, maxID, xmax int64) (int64, error) {
	stmt := c.sql.deleteConfirmed
	if c.retention != 0 {
		stmt = c.sql.markConfirmed
	}
	var lo int64
	sctx, cancel := context.WithTimeout(ctx, c.timeout)
	err := c.pool.QueryRow(sctx, c.sql.cleanupFloor, maxID).Scan(&lo)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("cleanup: %w", err)
	}
	var total int64
	after := lo - 1
	for {
		sctx, cancel := context.WithTimeout(ctx, c.timeout)
		var n int64
		err := c.pool.QueryRow(sctx, stmt, outboxsql.ConfirmedArgs{MaxID: maxID, Batch: c.batch, Xmax: xmax, After: after}.Args()...).Scan(&n, &after)
		cancel()
		if err != nil {
			return total, fmt.Errorf("cleanup: remove confirmed rows: %w", err)
		}
		total += n
		if c.retention != 0 && n > 0 {
			c.settled.note(after) // marked published
		}
		if n < int64(c.batch) {
			return total, nil
		}
	}
}

// prune deletes published rows older than Retention, in batches.
func (c *cleanup) prune(ctx context.Context) error {
	stmt := c.sql.prune
	args := outboxsql.PruneArgs{Retention: c.retention, Batch: c.batch}.Args()
	for {
		sctx, cancel := context.WithTimeout(ctx, c.timeout)
		tag, err := c.pool.Exec(sctx, stmt, args...)
		cancel()
		if err != nil {
			return fmt.Errorf("cleanup: prune: %w", err)
		}
		if tag.RowsAffected() < int64(c.batch) {
			return nil
		}
	}
}

// publicationChanged: the publication is right, but not the one the
// session started with.
type publicationChanged struct{ was, now string }

func (e *publicationChanged) Error() string {
	return fmt.Sprintf("the publication changed while the relay streamed (fingerprint %s, now %s): rows written meanwhile may not have been streamed; "+
		"the next session republishes the table's unpublished rows", e.was, e.now)
}

// checkPublication checks the publication and compares its fingerprint
// with the session's.
func (c *cleanup) checkPublication(ctx context.Context) error {
	fp, err := c.pub.check(ctx, c.pool, c.srv)
	if err != nil {
		return err
	}
	if fp != c.fingerprint {
		return &publicationChanged{was: c.fingerprint, now: fp}
	}
	return nil
}
