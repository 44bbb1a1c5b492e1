package entoutbox

import (
	"context"
	"errors"
	"fmt"
)

// TxCommitter is a transaction WithTx can finish: the generated *ent.Tx.
type TxCommitter interface {
	Commit() error
	Rollback() error
}

// TxBeginner starts transactions of type T: the generated *ent.Client,
// whose Tx method returns *ent.Tx.
type TxBeginner[T TxCommitter] interface {
	Tx(context.Context) (T, error)
}

// WithTx runs fn in a transaction of client and commits it if fn returns
// nil. If fn returns an error, WithTx rolls back and returns that error as
// is; if fn panics, WithTx rolls back and panics again. Entity rows and the
// outbox rows of their events therefore commit together or not at all.
//
//	err := entoutbox.WithTx(ctx, client, func(tx *ent.Tx) error {
//		_, err := tx.Order.Create().SetTotal(1250).Save(ctx)
//		return err
//	})
//
// It is generic so entoutbox need not import the application's generated
// package: T is inferred from fn.
func WithTx[T TxCommitter](ctx context.Context, client TxBeginner[T], fn func(tx T) error) error {
	tx, err := client.Tx(ctx)
	if err != nil {
		return fmt.Errorf("entoutbox: begin transaction: %w", err)
	}
	done := false
	defer func() {
		if !done {
			// fn panicked: the transaction must not stay open on the
			// connection while the panic unwinds.
			_ = tx.Rollback()
		}
	}()
	if err := fn(tx); err != nil {
		done = true
		if rbErr := tx.Rollback(); rbErr != nil {
			return errors.Join(err, fmt.Errorf("entoutbox: roll back: %w", rbErr))
		}
		return err
	}
	done = true
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("entoutbox: commit: %w", err)
	}
	return nil
}
