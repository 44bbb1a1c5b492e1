package gormoutbox

import (
	"fmt"

	"gorm.io/gorm"

	"github.com/txoutbox/txoutbox"
)

// Emit writes events to the outbox on tx's transaction, for code that has
// no model at hand (a bulk update, a command handler). Call it with the tx
// of db.Transaction:
//
//	err := db.Transaction(func(tx *gorm.DB) error {
//		if err := tx.Model(&Order{}).Where("due < now()").Update("status", "overdue").Error; err != nil {
//			return err
//		}
//		return gormoutbox.Emit(tx, overdue...)
//	})
//
// Events without a Topic get Config.DefaultTopic; everything else must be
// set (txoutbox.NewEvent). Outside a transaction Emit returns an error
// matching ErrNoTransaction whatever the TxPolicy, since there is no model
// write to wrap; without the plugin registered, ErrNotRegistered. Under
// DryRun it writes nothing. An error leaves the transaction aborted by
// PostgreSQL: return it from the db.Transaction function so it rolls back.
func Emit(tx *gorm.DB, events ...txoutbox.Event) error {
	p, ok := tx.Config.Plugins[Name].(*Plugin)
	if !ok {
		return ErrNotRegistered
	}
	if tx.Error != nil {
		return fmt.Errorf("gormoutbox: emit on a failed *gorm.DB: %w", tx.Error)
	}
	if !inTransaction(tx) {
		return fmt.Errorf("gormoutbox: %w: Emit needs the tx of db.Transaction (or db.Begin)", ErrNoTransaction)
	}
	if tx.DryRun || len(events) == 0 {
		return nil
	}
	if p.defaultTopic != "" {
		for i := range events {
			if events[i].Topic == "" {
				events[i].Topic = p.defaultTopic
			}
		}
	}
	w, err := p.writer(tx)
	if err != nil {
		return err
	}
	if err := w.Write(tx.Statement.Context, tx.Statement.ConnPool, events...); err != nil {
		return fmt.Errorf("gormoutbox: emit %d events: %w", len(events), err)
	}
	return nil
}
