// Package partitions maintains an outbox table partitioned by ranges of
// id (docs/partitions.md): it converts an unpartitioned outbox, creates
// partitions ahead of the writers, and drops the partitions whose rows are
// all published and past retention. The relay's prune round and the
// migrations' Partition call it; its SQL is in internal/outboxsql.
package partitions

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// Ahead is how many partitions' worth of ids the partitions cover beyond
// the partition-sized step holding the highest id (so more than Ahead
// partitions' worth past it): writers fill them without waiting for a
// partition to be created.
const Ahead = 2

// DB is what the package runs its statements on: a *sql.DB, or the
// *sql.Conn that holds a relay's prune lock.
type DB interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// LockTimeout is how long a change to the partitions waits for a lock
// before it gives up until the next round.
const LockTimeout = time.Second

// Timeouts bound the changes to the partitions: a lock wait longer than
// Lock fails (and the next round tries again) instead of queueing an
// ACCESS EXCLUSIVE lock every claim and writer would wait behind.
type Timeouts struct {
	Lock      time.Duration
	Statement time.Duration
}

// Leaf is one partition: its quoted, qualified name and its range.
type Leaf struct {
	Name  string
	Bound outboxsql.Bound
}

// State is what a maintenance round starts from.
type State struct {
	Partitioned bool  // the table is partitioned
	Owner       bool  // the role may create and drop its partitions
	MaxID       int64 // the highest id written, or handed out to a writer when Owner
	Floor       int64 // the claim floor
}

// ReadState reads the table's State.
func ReadState(ctx context.Context, db DB, n outboxsql.Names) (State, error) {
	var s State
	err := db.QueryRowContext(ctx, n.Render(outboxsql.PartitionState)).Scan(&s.Partitioned, &s.Owner, &s.MaxID, &s.Floor)
	if err != nil {
		return State{}, fmt.Errorf("read partition state: %w", err)
	}
	return s, nil
}

// List returns the table's partitions, the ranges in id order and the
// default partition last.
func List(ctx context.Context, db DB, n outboxsql.Names) ([]Leaf, error) {
	rows, err := db.QueryContext(ctx, n.Render(outboxsql.PartitionList))
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	defer rows.Close()
	var out []Leaf
	for rows.Next() {
		var name, expr string
		if err := rows.Scan(&name, &expr); err != nil {
			return nil, fmt.Errorf("list partitions: %w", err)
		}
		b, ok := outboxsql.ParseBound(expr)
		if !ok {
			return nil, fmt.Errorf("list partitions: %s has bound %q, not a range of ids", name, expr)
		}
		out = append(out, Leaf{Name: name, Bound: b})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	sort.SliceStable(out, func(i, j int) bool { return less(out[i].Bound, out[j].Bound) })
	return out, nil
}

func less(a, b outboxsql.Bound) bool {
	switch {
	case a.Default || b.Default:
		return !a.Default && b.Default
	case !a.HasFrom || !b.HasFrom:
		return !a.HasFrom && b.HasFrom
	}
	return a.From < b.From
}

// Size is the partition size in ids: the width of the highest range with
// both ends, 0 if there is none.
func Size(leaves []Leaf) int64 {
	for i := len(leaves) - 1; i >= 0; i-- {
		if b := leaves[i].Bound; b.HasFrom && b.HasTo {
			return b.To - b.From
		}
	}
	return 0
}

// Top is the end of the highest range, 0 if there is none.
func Top(leaves []Leaf) int64 {
	var t int64
	for _, l := range leaves {
		if l.Bound.HasTo && l.Bound.To > t {
			t = l.Bound.To
		}
	}
	return t
}

// leafName is the quoted, qualified name of the partition starting at from.
func leafName(schema, table string, from int64) string {
	return ident.Qualified(schema, table+"_p"+strconv.FormatInt(from, 10))
}

// Table is an outbox table's names and its schema and name unquoted, for
// naming its partitions.
type Table struct {
	Names        outboxsql.Names
	Schema, Name string
}

// CreateAhead creates the partitions missing up to Ahead steps of the
// partition size beyond the one holding maxID, and returns their names. When writers outran the
// partitions (ids at or past the highest range went to the default
// partition), the next partition starts one partition beyond maxID, so no
// row in the default partition, nor one a writer is putting there (maxID
// counts the ids handed out, ReadState), falls in it, and the gap stays
// the default partition's. Each partition is created in a transaction of its
// own under t's timeouts.
func CreateAhead(ctx context.Context, db DB, t Table, leaves []Leaf, maxID int64, to Timeouts) ([]string, error) {
	size := Size(leaves)
	if size <= 0 {
		return nil, errors.New("create partitions: no partition with a finite range gives the partition size")
	}
	next := Top(leaves)
	want := (maxID/size + 1 + Ahead) * size
	if next <= maxID {
		next = (maxID/size + 2) * size
		want = next + Ahead*size
	}
	var created []string
	for from := next; from < want; from += size {
		name := leafName(t.Schema, t.Name, from)
		err := inTx(ctx, db, to, func(tx *sql.Tx) error {
			v := outboxsql.PartitionVars{Partition: name, From: from, To: from + size}
			if err := tx.QueryRowContext(ctx, t.Names.Render(outboxsql.PartitionTableOwner)).Scan(&v.Object); err != nil {
				return fmt.Errorf("read the table's owner: %w", err)
			}
			for _, tmpl := range []string{outboxsql.PartitionCreate, outboxsql.PartitionOwner} {
				if _, err := tx.ExecContext(ctx, outboxsql.RenderPartition(t.Names, tmpl, v)); err != nil {
					return err
				}
			}
			_, err := tx.ExecContext(ctx, outboxsql.RenderPartition(t.Names, outboxsql.PartitionAttach, v))
			return err
		})
		if err != nil {
			return created, fmt.Errorf("create partition %s: %w", name, err)
		}
		created = append(created, name)
	}
	return created, nil
}

// Sweep drops every partition wholly below floor (the claim floor: no id
// there can be written any more) whose rows are all published before
// retention, and returns the partitions dropped and those kept by dead
// rows, whose published rows the relay prunes one by one. Each drop takes
// a transaction of its own, which locks the parent, then the partition
// (under to.Lock), checks its rows again, and drops it; one that fails is
// left for the next round.
func Sweep(ctx context.Context, db DB, n outboxsql.Names, leaves []Leaf, floor int64, retention time.Duration, to Timeouts) (dropped, kept []string, err error) {
	for _, l := range leaves {
		if l.Bound.Default {
			kept = append(kept, l.Name)
			continue
		}
		if !l.Bound.HasTo || l.Bound.To > floor {
			continue
		}
		var unpublished, dead, recent bool
		err := inTx(ctx, db, to, func(tx *sql.Tx) error {
			if err := readRows(ctx, tx, n.ForPartition(l.Name), retention, &unpublished, &dead, &recent); err != nil {
				return err
			}
			if unpublished || dead || recent {
				return nil
			}
			v := outboxsql.PartitionVars{Partition: l.Name}
			if _, err := tx.ExecContext(ctx, outboxsql.RenderPartition(n, outboxsql.PartitionLock, v)); err != nil {
				return err
			}
			// Under the lock no operator can return a row to pending.
			if err := readRows(ctx, tx, n.ForPartition(l.Name), retention, &unpublished, &dead, &recent); err != nil {
				return err
			}
			if unpublished || dead || recent {
				return nil
			}
			_, err := tx.ExecContext(ctx, outboxsql.RenderPartition(n, outboxsql.PartitionDrop, v))
			return err
		})
		switch {
		case err != nil:
			// The default partition and those kept so far are still
			// pruned row by row; the rest wait for the next round.
			for _, rest := range leaves {
				if rest.Bound.Default {
					kept = append(kept, rest.Name)
				}
			}
			return dropped, kept, fmt.Errorf("drop partition %s: %w", l.Name, err)
		case dead:
			kept = append(kept, l.Name)
		case !unpublished && !recent:
			dropped = append(dropped, l.Name)
		}
	}
	return dropped, kept, nil
}

func readRows(ctx context.Context, tx *sql.Tx, leaf outboxsql.Names, retention time.Duration, unpublished, dead, recent *bool) error {
	err := tx.QueryRowContext(ctx, leaf.Render(outboxsql.PartitionRows), outboxsql.RetentionArgs{Retention: retention}.Args()...).
		Scan(unpublished, dead, recent)
	if err != nil {
		return fmt.Errorf("read rows: %w", err)
	}
	return nil
}

// inTx runs fn in a transaction under to's timeouts and commits it.
func inTx(ctx context.Context, db DB, to Timeouts, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, outboxsql.PartitionSettings,
		outboxsql.PartitionSettingsArgs{LockTimeout: to.Lock, StatementTimeout: to.Statement}.Args()...); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}
