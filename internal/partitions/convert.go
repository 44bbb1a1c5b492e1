package partitions

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// ErrConvert is matched by the errors of a conversion refused for the
// table's state (a foreign key, a publication, writers past the bound).
var ErrConvert = errors.New("cannot convert the outbox to a partitioned table")

// Convert makes t's table partitioned by ranges of size ids, if it is not
// already, with the table as its first partition (every id below a bound
// at least one partition ahead of the sequence), a default partition and
// the next partitions; then creates the partitions missing ahead. Writers
// and relays run on meanwhile: they wait for the one short transaction
// that swaps the table, which takes its ACCESS EXCLUSIVE lock under
// to.Lock and is tried up to attempts times.
func Convert(ctx context.Context, db DB, t Table, size int64, to Timeouts, attempts int) error {
	if size <= 0 {
		return fmt.Errorf("%w: the partition size is %d ids", ErrConvert, size)
	}
	n := t.Names
	check := ident.Quote(truncate(t.Name + "_partition_check"))
	st, err := convertState(ctx, db, n, check)
	if err != nil {
		return err
	}
	if st.kind == "r" {
		if err := convert(ctx, db, t, size, to, attempts, check); err != nil {
			return err
		}
	}
	s, err := ReadState(ctx, db, n)
	if err != nil {
		return err
	}
	leaves, err := List(ctx, db, n)
	if err != nil {
		return err
	}
	_, err = CreateAhead(ctx, db, t, leaves, s.MaxID, to)
	return err
}

type convState struct {
	kind, owner, seq, identity string
	referenced, published      bool
	checked                    int64 // the validated constraint's bound, 0 if none
}

func convertState(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, n outboxsql.Names, check string) (convState, error) {
	var s convState
	err := q.QueryRowContext(ctx, n.Render(outboxsql.ConvertState), strings.Trim(check, `"`)).
		Scan(&s.kind, &s.owner, &s.seq, &s.identity, &s.referenced, &s.published, &s.checked)
	if err != nil {
		return convState{}, fmt.Errorf("read the table: %w", err)
	}
	switch {
	case s.kind != "r" && s.kind != "p":
		return s, fmt.Errorf("%w: %s is not a table (relkind %s)", ErrConvert, n.Table, s.kind)
	case s.kind == "r" && s.referenced:
		return s, fmt.Errorf("%w: a foreign key references %s", ErrConvert, n.Table)
	case s.kind == "r" && s.published:
		return s, fmt.Errorf("%w: %s is in a publication; drop it from the publication (hand a WAL relay's table back with outbox wal takeover), "+
			"convert, and publish the partitioned table with publish_via_partition_root = true", ErrConvert, n.Table)
	case s.kind == "r" && (s.seq == "" || s.identity == ""):
		return s, fmt.Errorf("%w: %s.id is not an identity column", ErrConvert, n.Table)
	}
	return s, nil
}

// convert runs the conversion of an unpartitioned table.
func convert(ctx context.Context, db DB, t Table, size int64, to Timeouts, attempts int, check string) (err error) {
	n := t.Names
	var last int64
	st, err := convertState(ctx, db, n, check)
	if err != nil {
		return err
	}
	if err := db.QueryRowContext(ctx, outboxsql.ConvertSequence, st.seq).Scan(&last); err != nil {
		return fmt.Errorf("read the sequence: %w", err)
	}
	bound := st.checked
	// The check fails every writer once the ids reach its bound: a
	// conversion that fails once the table holds it takes it away again.
	checked := bound > 0
	defer func() {
		if err != nil && checked {
			err = dropCheck(ctx, db, t, check, bound, to, attempts, err)
		}
	}()
	if bound <= last+size/2 {
		// A bound one to two partitions ahead of the sequence: writers
		// keep inserting below it until the swap.
		bound = (last/size + 2) * size
		obj := outboxsql.PartitionVars{Object: check, To: bound}
		for _, tmpl := range []string{outboxsql.ConvertDropCheck, outboxsql.ConvertAddCheck} {
			err := retryLock(ctx, attempts, func() error {
				return inTx(ctx, db, to, func(tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, outboxsql.RenderPartition(n, tmpl, obj))
					return err
				})
			})
			if err != nil {
				return fmt.Errorf("add the partition check: %w", err)
			}
			checked = true
		}
		// Validation reads the table under a SHARE UPDATE EXCLUSIVE lock:
		// writers and relays go on.
		err := inTx(ctx, db, Timeouts{Lock: to.Lock, Statement: 24 * time.Hour}, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, outboxsql.RenderPartition(n, outboxsql.ConvertValidate, obj))
			return err
		})
		if err != nil {
			return fmt.Errorf("validate the partition check: %w", err)
		}
	}
	err = retryLock(ctx, attempts, func() error {
		return inTx(ctx, db, to, func(tx *sql.Tx) error { return swap(ctx, tx, t, size, bound, check) })
	})
	if err != nil {
		return fmt.Errorf("convert %s: %w", n.Table, err)
	}
	return nil
}

// dropCheck drops the check of a conversion that failed with cause, and
// returns cause, with what to do by hand if the check could not be
// dropped. It runs even when ctx ended.
func dropCheck(ctx context.Context, db DB, t Table, check string, bound int64, to Timeouts, attempts int, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(max(attempts, 1))*(to.Lock+2*time.Second))
	defer cancel()
	drop := outboxsql.RenderPartition(t.Names, outboxsql.ConvertDropCheck, outboxsql.PartitionVars{Object: check})
	err := retryLock(ctx, attempts, func() error {
		return inTx(ctx, db, to, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, drop)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("%w; the check %s is left on %s, and fails every insert of an id from %d on: "+
			"run the conversion again, or %s (dropping it failed: %v)", cause, check, t.Names.Table, bound, drop, err)
	}
	return cause
}

// swap is the conversion's transaction: see outboxsql.ConvertLock.
func swap(ctx context.Context, tx *sql.Tx, t Table, size, bound int64, check string) error {
	n := t.Names
	if _, err := tx.ExecContext(ctx, n.Render(outboxsql.ConvertLock)); err != nil {
		return err
	}
	st, err := convertState(ctx, tx, n, check)
	if err != nil || st.kind == "p" {
		return err // converted by another process meanwhile
	}
	var last int64
	if err := tx.QueryRowContext(ctx, outboxsql.ConvertSequence, st.seq).Scan(&last); err != nil {
		return fmt.Errorf("read the sequence: %w", err)
	}
	if st.checked != bound || last >= bound {
		return fmt.Errorf("%w: the writers reached id %d, past the first partition's end %d; run again", ErrConvert, last, bound)
	}
	first := "_p0"
	leafUnqualified := ident.Quote(t.Name + first)
	leaf := ident.Qualified(t.Schema, t.Name+first)
	type index struct{ name, def, constraint, constraintDef string }
	var indexes []index
	if err := each(ctx, tx, n.Render(outboxsql.ConvertIndexes), func(r *sql.Rows) error {
		var i index
		if err := r.Scan(&i.name, &i.def, &i.constraint, &i.constraintDef); err != nil {
			return err
		}
		indexes = append(indexes, i)
		return nil
	}); err != nil {
		return fmt.Errorf("read indexes: %w", err)
	}
	var triggers [][2]string
	if err := each(ctx, tx, n.Render(outboxsql.ConvertTriggers), func(r *sql.Rows) error {
		var name, def string
		err := r.Scan(&name, &def)
		triggers = append(triggers, [2]string{name, def})
		return err
	}); err != nil {
		return fmt.Errorf("read triggers: %w", err)
	}
	var grants []string
	if err := each(ctx, tx, n.Render(outboxsql.ConvertGrants), func(r *sql.Rows) error {
		var g string
		err := r.Scan(&g)
		grants = append(grants, g)
		return err
	}); err != nil {
		return fmt.Errorf("read grants: %w", err)
	}

	var stmts []string
	v := func(tmpl string, vars outboxsql.PartitionVars) {
		stmts = append(stmts, outboxsql.RenderPartition(n, tmpl, vars))
	}
	// The old table steps aside as the first partition.
	v(outboxsql.ConvertRename, outboxsql.PartitionVars{Partition: leafUnqualified})
	for _, i := range indexes {
		renamed := ident.Quote(truncate(t.Name + first + "_" + strings.TrimPrefix(unquote(i.name), t.Name+"_")))
		if i.constraint != "" {
			v(outboxsql.ConvertRenameConstraint, outboxsql.PartitionVars{Partition: leaf, Def: i.constraint, Object: renamed})
		} else {
			v(outboxsql.ConvertRenameIndex, outboxsql.PartitionVars{Def: qualify(t.Schema, i.name), Object: renamed})
		}
	}
	for _, tr := range triggers {
		v(outboxsql.ConvertDropTrigger, outboxsql.PartitionVars{Partition: leaf, Object: tr[0]})
	}
	v(outboxsql.ConvertDropIdentity, outboxsql.PartitionVars{Partition: leaf})
	// The parent takes the name.
	v(outboxsql.ConvertCreateParent, outboxsql.PartitionVars{Partition: leaf})
	v(outboxsql.ConvertParentCheck, outboxsql.PartitionVars{Object: check})
	identity := outboxsql.ConvertIdentityAlways
	if st.identity == "d" {
		identity = outboxsql.ConvertIdentityByDef
	}
	v(identity, outboxsql.PartitionVars{From: last + 1})
	for _, i := range indexes {
		if i.constraint != "" {
			v(outboxsql.ConvertAddConstraint, outboxsql.PartitionVars{Object: i.constraint, Def: i.constraintDef})
		} else {
			stmts = append(stmts, i.def) // names the table, now the parent
		}
	}
	for _, tr := range triggers {
		stmts = append(stmts, tr[1])
	}
	v(outboxsql.ConvertOwner, outboxsql.PartitionVars{Object: st.owner})
	stmts = append(stmts, grants...)
	// The old table's indexes match the parent's: attaching adopts them,
	// and the validated check proves the range without a scan.
	v(outboxsql.ConvertAttachFirst, outboxsql.PartitionVars{Partition: leaf, To: bound})
	stmts = append(stmts, outboxsql.RenderPartition(outboxsql.Names{Table: leaf}, outboxsql.ConvertDropCheck, outboxsql.PartitionVars{Object: check}))
	deflt := ident.Qualified(t.Schema, t.Name+"_default")
	v(outboxsql.PartitionCreate, outboxsql.PartitionVars{Partition: deflt})
	v(outboxsql.PartitionOwner, outboxsql.PartitionVars{Partition: deflt, Object: st.owner})
	v(outboxsql.PartitionAttachDefault, outboxsql.PartitionVars{Partition: deflt})
	next := leafName(t.Schema, t.Name, bound)
	v(outboxsql.PartitionCreate, outboxsql.PartitionVars{Partition: next})
	v(outboxsql.PartitionOwner, outboxsql.PartitionVars{Partition: next, Object: st.owner})
	v(outboxsql.PartitionAttach, outboxsql.PartitionVars{Partition: next, From: bound, To: bound + size})
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	return nil
}

// retryLock runs fn until it succeeds, fails for another reason than a
// lock timeout, or failed attempts times.
func retryLock(ctx context.Context, attempts int, fn func() error) error {
	var err error
	for i := 0; i < max(attempts, 1); i++ {
		if err = fn(); err == nil || !isLockTimeout(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(i+1) * 100 * time.Millisecond):
		}
	}
	return err
}

var isLockTimeout = outboxsql.IsLockNotAvailable

func each(ctx context.Context, tx *sql.Tx, query string, fn func(*sql.Rows) error) error {
	rows, err := tx.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// truncate cuts a name to PostgreSQL's identifier limit, as it would.
func truncate(name string) string {
	if len(name) > ident.MaxLen {
		return name[:ident.MaxLen]
	}
	return name
}

func unquote(q string) string {
	if strings.HasPrefix(q, `"`) {
		return strings.ReplaceAll(strings.Trim(q, `"`), `""`, `"`)
	}
	return q
}

// qualify prefixes a quoted name with the quoted schema, if any.
func qualify(schema, quoted string) string {
	if schema == "" {
		return quoted
	}
	return ident.Quote(schema) + "." + quoted
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
