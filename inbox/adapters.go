package inbox

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/txoutbox"
)

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
