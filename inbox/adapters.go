package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/txoutbox/txoutbox"
)

// Gorm returns the transaction under tx, a *gorm.DB inside
// db.Transaction(func(tx *gorm.DB) error {...}) or from db.Begin(), for
// Claim and Process:
//
//	err := db.Transaction(func(tx *gorm.DB) error {
//		_, err := ib.Process(ctx, inbox.Gorm(tx), "billing", eventID, func() error {
//			return tx.Model(&acct).Update("balance", gorm.Expr("balance + ?", amount)).Error
//		})
//		return err
//	})
//
// If tx is not in a transaction (its connection is the pool, not one that
// commits), the returned value fails every statement with
// ErrNotInTransaction, so Claim refuses before anything is written. The
// check is GORM's own nesting test, so it also holds with PrepareStmt.
func Gorm(tx *gorm.DB) txoutbox.SQLExecer {
	switch {
	case tx == nil || tx.Statement == nil:
		return failExec{errors.New("inbox: gorm: the *gorm.DB is nil")}
	case tx.Error != nil:
		return failExec{fmt.Errorf("inbox: gorm: %w", tx.Error)}
	}
	pool := tx.Statement.ConnPool
	if _, ok := pool.(gorm.TxCommitter); !ok {
		return failExec{fmt.Errorf("%w: the *gorm.DB's connection is a %T; call inside db.Transaction or on db.Begin()", ErrNotInTransaction, pool)}
	}
	return pool
}

// failExec is a connection that refuses every statement with err.
type failExec struct{ err error }

func (f failExec) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return nil, f.err
}

// Pgx adapts a pgx transaction for Claim and Process. It takes pgx.Tx, not
// a pool, so an inbox record cannot commit on its own by mistake.
func Pgx(tx pgx.Tx) txoutbox.SQLExecer { return pgxExec{tx} }

type pgxExec struct{ tx pgx.Tx }

func (p pgxExec) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if p.tx == nil {
		return nil, errors.New("inbox: pgx: the pgx.Tx is nil")
	}
	tag, err := p.tx.Exec(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgxResult(tag.RowsAffected()), nil
}

// pgxResult is a command tag's row count as a sql.Result.
type pgxResult int64

func (r pgxResult) RowsAffected() (int64, error) { return int64(r), nil }

func (pgxResult) LastInsertId() (int64, error) {
	return 0, errors.New("inbox: pgx: LastInsertId is not supported by PostgreSQL")
}
