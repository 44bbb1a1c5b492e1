package walrelay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// pgxDB is a pgx pool, connection or transaction.
type pgxDB interface {
	pgxExecer
	pgxQuerier
}

// highestSettled is the highest id of a row the table holds as published
// or dead, as far as a Run knows, -1 until a session read it: later
// sessions of the Run raise it by the rows the relay settles rather than
// walking the table again (see resume). The Run owns it; the parts that
// settle rows raise it.
type highestSettled struct{ v atomic.Int64 }

func newHighestSettled() *highestSettled {
	h := &highestSettled{}
	h.forget()
	return h
}

// load returns the highest settled row, -1 when unknown.
func (h *highestSettled) load() int64 { return h.v.Load() }

// set records m, read from the table.
func (h *highestSettled) set(m int64) { h.v.Store(m) }

// forget makes it unknown: the next session reads it again.
func (h *highestSettled) forget() { h.v.Store(-1) }

// note raises it to row, a row the relay marked published or dead, once
// a session has read it. Rows settled by other relays meanwhile are not
// seen: at worst they are published again after a crash of PostgreSQL,
// never skipped wrongly.
func (h *highestSettled) note(row int64) {
	for m := h.v.Load(); m >= 0 && row > m; m = h.v.Load() {
		if h.v.CompareAndSwap(m, row) {
			return
		}
	}
}

// tableRows settles the table's rows for the stream and the lanes, and
// looks up the ones a resumed stream brings again, each statement within
// timeout.
type tableRows struct {
	db      pgxDB
	sql     *statements
	timeout time.Duration // Config.StatementTimeout
	settled *highestSettled
}

// skipSettled drops from t the rows the table holds as published or
// dead: events published before a crash of PostgreSQL moved the slot's
// position back (it is written to disk at checkpoints). Only a row found
// settled is skipped: one not found may be committed but not yet visible
// (the walsender can send a commit before other sessions see it), so it
// is published, like a row the cleanup deleted (Retention 0) and a
// table-less event, which cannot be told apart: those go out again.
func (tr *tableRows) skipSettled(ctx context.Context, t *txn, end uint64, rs resume) error {
	var ids []int64
	for _, ev := range t.events {
		if rs.mayBeSettled(end, ev.row) {
			ids = append(ids, ev.row)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	settled, err := tr.settledOf(ctx, ids)
	if err != nil {
		return err
	}
	kept := t.events[:0]
	for _, ev := range t.events {
		if !settled[ev.row] {
			kept = append(kept, ev)
		}
	}
	t.events = kept
	return nil
}

// settledOf returns which of ids the table holds as published or dead.
func (tr *tableRows) settledOf(ctx context.Context, ids []int64) (map[int64]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, tr.timeout)
	defer cancel()
	rows, err := tr.db.Query(ctx, tr.sql.settled, outboxsql.Int64Array(ids))
	if err != nil {
		return nil, fmt.Errorf("check resumed rows: %w", err)
	}
	defer rows.Close()
	settled := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		settled[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("check resumed rows: %w", err)
	}
	return settled, nil
}

// visibleWithin bounds how long markDead waits for a row to appear: the
// walsender can send a commit a moment before other sessions see it, never
// seconds before.
const visibleWithin = time.Second

// errRowGone: the row to mark dead is not in the table (deleted by hand).
var errRowGone = errors.New("the row is not in the table")

// markDead marks row dead after attempts, with reason, within one
// StatementTimeout. An update that finds no row waits up to visibleWithin
// for the row to appear, since its insert is known to have committed, and
// returns errRowGone if it does not; it stops at once when the row exists
// but is settled already (a duplicate after a resume).
func (tr *tableRows) markDead(ctx context.Context, row int64, attempts int, reason string) error {
	ctx, cancel := context.WithTimeout(ctx, tr.timeout)
	defer cancel()
	deadline := time.Now().Add(visibleWithin)
	for {
		tag, err := tr.db.Exec(ctx, tr.sql.markDead, outboxsql.MarkDeadArgs{ID: row, Attempts: attempts, Reason: reason}.Args()...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() > 0 {
			tr.settled.note(row)
			return nil
		}
		var exists bool
		if err := tr.db.QueryRow(ctx, tr.sql.rowExists, row).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		if time.Now().After(deadline) {
			return errRowGone
		}
		if !publish.Sleep(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
}
