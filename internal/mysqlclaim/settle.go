package mysqlclaim

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// Mark records that the rows ids, which owner claimed under version
// (Claimed.Version), were published, and returns how many it marked. A
// row taken over, released, failed, replayed or claimed again since is
// left alone: its version is another, and it is published again (at
// least once). More than a statement's worth of ids are marked in several
// statements, each committed apart.
func Mark(ctx context.Context, db Execer, n outboxsql.Names, owner string, version time.Time, ids []int64) (int64, error) {
	return settle(ctx, db, "mark", outboxsql.MySQLMarkPublished, n, owner, version, ids)
}

// Release returns the rows ids, which owner claimed under version, to
// pending, due at once, their attempts unchanged (shutdown, rows held back
// behind a failed row of their aggregate), and returns how many it
// released. Rows settled or claimed again since are left alone.
func Release(ctx context.Context, db Execer, n outboxsql.Names, owner string, version time.Time, ids []int64) (int64, error) {
	return settle(ctx, db, "release", outboxsql.MySQLRelease, n, owner, version, ids)
}

func settle(ctx context.Context, db Execer, what string, stmt func(outboxsql.Names, int) string,
	n outboxsql.Names, owner string, version time.Time, ids []int64) (int64, error) {
	if owner == "" || version.IsZero() {
		return 0, fmt.Errorf("%w: %s needs the owner and the claim's version", ErrInvalidParams, what)
	}
	var done int64
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), maxIDsPerStatement)]
		ids = ids[len(chunk):]
		res, err := outboxsql.MySQLExec(ctx, db, stmt(n, len(chunk)), outboxsql.MySQLSettleArgs{Owner: owner, Version: version, IDs: chunk}.Args())
		if err != nil {
			return done, fmt.Errorf("mysqlclaim: %s %d rows: %w", what, len(chunk), err)
		}
		k, err := res.RowsAffected()
		if err != nil {
			return done, fmt.Errorf("mysqlclaim: %s %d rows: %w", what, len(chunk), err)
		}
		done += k
	}
	return done, nil
}

// Failure is one failed publish of a claimed row.
type Failure = outboxsql.MySQLFailure

// Outcome is a failure recorded: the row's state after it, "pending" (a
// retry after its backoff) or "dead".
type Outcome struct {
	ID    int64
	State string
}

// Fail records failures in one transaction, as the PostgreSQL relay's
// Fail does: each counts an attempt; a permanent one that reaches
// maxAttempts makes its row dead; any other leaves it pending, retried
// after its Delay. A failure of a row its Owner no longer holds under its
// Version is not recorded. It returns the outcomes of those recorded, in
// the order given. FailTx records them in the caller's transaction.
func Fail(ctx context.Context, db TxBeginner, n outboxsql.Names, maxAttempts int, failures []Failure) ([]Outcome, error) {
	if err := validFailures(maxAttempts, failures); err != nil || len(failures) == 0 {
		return nil, err
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("mysqlclaim: begin fail: %w", err)
	}
	defer tx.Rollback()
	out, err := FailTx(ctx, tx, n, maxAttempts, failures)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("mysqlclaim: commit fail: %w", err)
	}
	return out, nil
}

func validFailures(maxAttempts int, failures []Failure) error {
	if maxAttempts < 1 {
		return fmt.Errorf("%w: maxAttempts %d is not positive", ErrInvalidParams, maxAttempts)
	}
	for _, f := range failures {
		if f.Owner == "" || f.Version.IsZero() {
			return fmt.Errorf("%w: the failure of row %d needs the owner and the claim's version", ErrInvalidParams, f.ID)
		}
	}
	return nil
}

// FailTx is Fail in tx, a READ COMMITTED transaction of the caller's, so
// that failures, releases and marks commit together. Any number of
// failures: their outcomes are read maxIDsPerStatement at a time.
func FailTx(ctx context.Context, tx *sql.Tx, n outboxsql.Names, maxAttempts int, failures []Failure) ([]Outcome, error) {
	if err := validFailures(maxAttempts, failures); err != nil || len(failures) == 0 {
		return nil, err
	}
	stmt := n.Render(outboxsql.MySQLFail)
	var recorded []int64
	for _, f := range failures {
		res, err := outboxsql.MySQLExec(ctx, tx, stmt, outboxsql.MySQLFailArgs{MySQLFailure: f, MaxAttempts: maxAttempts}.Args())
		if err != nil {
			return nil, fmt.Errorf("mysqlclaim: fail row %d: %w", f.ID, err)
		}
		if k, err := res.RowsAffected(); err != nil {
			return nil, fmt.Errorf("mysqlclaim: fail row %d: %w", f.ID, err)
		} else if k == 1 {
			recorded = append(recorded, f.ID)
		}
	}
	state := make(map[int64]string, len(recorded))
	for rest := recorded; len(rest) > 0; {
		chunk := rest[:min(len(rest), maxIDsPerStatement)]
		rest = rest[len(chunk):]
		if err := readStates(ctx, tx, n, chunk, state); err != nil {
			return nil, err
		}
	}
	out := make([]Outcome, len(recorded))
	for i, id := range recorded {
		out[i] = Outcome{ID: id, State: state[id]}
	}
	return out, nil
}

// readStates reads the states of the rows ids into state.
func readStates(ctx context.Context, tx *sql.Tx, n outboxsql.Names, ids []int64, state map[int64]string) error {
	rows, err := outboxsql.MySQLQuery(ctx, tx, outboxsql.MySQLFailOutcome(n, len(ids)), outboxsql.MySQLIDsArgs[int64]{IDs: ids}.Args())
	if err != nil {
		return fmt.Errorf("mysqlclaim: read the failed rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id int64
			s  string
		)
		if err := rows.Scan(&id, &s); err != nil {
			return fmt.Errorf("mysqlclaim: read the failed rows: %w", err)
		}
		state[id] = s
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("mysqlclaim: read the failed rows: %w", err)
	}
	return nil
}
