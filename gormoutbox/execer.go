package gormoutbox

import (
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/txoutbox/txoutbox"
)

// Execer returns the transaction under tx, a *gorm.DB inside
// db.Transaction(func(tx *gorm.DB) error {...}) or from db.Begin(), for
// txoutbox.Writer.Write and package inbox's Claim and Process, so their rows
// commit or roll back with the model changes of the same transaction:
//
//	err := db.Transaction(func(tx *gorm.DB) error {
//		ex, err := gormoutbox.Execer(tx)
//		if err != nil {
//			return err
//		}
//		_, err = ib.Process(ctx, ex, "billing", eventID, func() error {
//			return tx.Model(&acct).Update("balance", gorm.Expr("balance + ?", amount)).Error
//		})
//		return err
//	})
//
// A tx that is not in a transaction (its connection is the pool) is refused
// with an error matching ErrNoTransaction, and a tx carrying an error with
// that error, before any SQL runs. The check is GORM's own nesting test, so
// it also holds with PrepareStmt.
func Execer(tx *gorm.DB) (txoutbox.SQLExecer, error) {
	switch {
	case tx == nil || tx.Statement == nil:
		return nil, errors.New("gormoutbox: Execer: the *gorm.DB is nil")
	case tx.Error != nil:
		return nil, fmt.Errorf("gormoutbox: Execer: %w", tx.Error)
	case !inTransaction(tx):
		return nil, fmt.Errorf("gormoutbox: %w: the *gorm.DB's connection is a %T; call inside db.Transaction or on db.Begin()",
			ErrNoTransaction, tx.Statement.ConnPool)
	}
	return tx.Statement.ConnPool, nil
}
