package gormoutbox_test

import (
	"fmt"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/txoutbox/txoutbox/gormoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

func TestBulkStatements(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		orders := []Order{{Total: 1}, {Total: 2}, {Total: 3}}
		if err := b.db.Create(&orders).Error; err != nil {
			t.Fatal(err)
		}
		// A recording model: a bulk statement has no model instances, so it
		// writes no events and is not refused. Emit writes them explicitly.
		err := b.db.Transaction(func(tx *gorm.DB) error {
			var paid []Order
			update := tx.Model(&paid).Clauses(clause.Returning{})
			if eng == testkit.MySQL {
				// No RETURNING on MySQL: read the rows, then update them.
				if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("total >= ?", 2).Find(&paid).Error; err != nil {
					return err
				}
				update = tx.Model(&Order{})
			}
			if err := update.Where("total >= ?", 2).Update("status", "paid").Error; err != nil {
				return err
			}
			for _, o := range paid {
				if err := gormoutbox.Emit(tx, mustEvent(t, "orders", "order", fmt.Sprint(o.ID), "order.paid")); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.db.Where("total = ?", 1).Delete(&Order{}).Error; err != nil {
			t.Fatal(err)
		}
		equal(t, "events", b.eventNames(), []string{"order/2/order.paid", "order/3/order.paid"})
		b.sameTx("orders", 2, "order")

		// A change-event model: without per-row data the statement is refused
		// before any SQL runs.
		products := []Product{{Name: "a", Price: 1}, {Name: "b", Price: 2}, {Name: "c", Price: 3}}
		if err := b.db.Create(&products).Error; err != nil {
			t.Fatal(err)
		}
		base := len(b.events())
		mustErrIs(t, b.db.Model(&Product{}).Where("price > ?", 1).Update("price", 10).Error, gormoutbox.ErrNoRowData)
		mustErrIs(t, b.db.Where("price > ?", 1).Delete(&Product{}).Error, gormoutbox.ErrNoRowData)
		mustErrIs(t, b.db.Delete(&Product{}, 1).Error, gormoutbox.ErrNoRowData)
		var n int64
		b.db.Model(&Product{}).Where("price = 10").Count(&n)
		if n != 0 || b.count("products") != 3 || len(b.events()) != base {
			t.Fatalf("a refused bulk statement changed rows (%d repriced, %d left) or wrote events", n, b.count("products"))
		}
		if eng == testkit.MySQL {
			// UPDATE ... RETURNING is PostgreSQL's (MySQL has none, MariaDB
			// only for INSERT and DELETE): per-row change events of a bulk
			// statement need it.
			return
		}
		// With RETURNING into a slice: one change event per affected row.
		var repriced []Product
		if err := b.db.Model(&repriced).Clauses(clause.Returning{}).Where("price > ?", 1).Update("price", 10).Error; err != nil {
			t.Fatal(err)
		}
		var deleted []Product
		if err := b.db.Clauses(clause.Returning{}).Where("name = ?", "c").Delete(&deleted).Error; err != nil {
			t.Fatal(err)
		}
		got := b.eventNames()[base:]
		equal(t, "change events", got, []string{"product/2/product.updated", "product/3/product.updated", "product/3/product.deleted"})
		for _, e := range b.events()[base:] {
			if e.Payload["Name"] == nil || e.Payload["ID"] == nil {
				t.Fatalf("event %v has no row payload: %v", e, e.Payload)
			}
		}
		// Without a model, nothing is intercepted (the documented way out).
		if err := b.db.Table("products").Where("id = ?", 1).Update("price", 5).Error; err != nil {
			t.Fatal(err)
		}
		if len(b.events()) != base+3 {
			t.Fatal("a model-less statement wrote events")
		}
	})
}

func TestEmit(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		ev := mustEvent(t, "", "order", "1", "order.noted") // Topic from DefaultTopic
		mustErrIs(t, gormoutbox.Emit(b.db, ev), gormoutbox.ErrNoTransaction)

		err := b.db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(&Note{Text: "n"}).Error; err != nil {
				return err
			}
			return gormoutbox.Emit(tx, ev, mustEvent(t, "audit", "note", "1", "note.added"))
		})
		if err != nil {
			t.Fatal(err)
		}
		_ = b.db.Transaction(func(tx *gorm.DB) error {
			if err := gormoutbox.Emit(tx, mustEvent(t, "orders", "order", "2", "order.noted")); err != nil {
				return err
			}
			return errAbort
		})
		var got []string
		for _, e := range b.events() {
			got = append(got, e.String())
		}
		equal(t, "events", got, []string{"orders/order/1/order.noted", "audit/note/1/note.added"})
		if b.writerIDs() {
			var noteXmin, eventXmin string
			b.raw.QueryRow(`SELECT xmin::text FROM notes`).Scan(&noteXmin)
			b.raw.QueryRow(`SELECT xmin::text FROM outbox WHERE event_type = 'note.added'`).Scan(&eventXmin)
			if noteXmin != eventXmin {
				t.Fatal("Emit wrote outside the caller's transaction")
			}
		}

		// An invalid event: an error, nothing written, the caller rolls back.
		err = b.db.Transaction(func(tx *gorm.DB) error {
			return gormoutbox.Emit(tx, badTopicEvent())
		})
		if err == nil {
			t.Fatal("Emit of an invalid event succeeded")
		}
		// DryRun: nothing.
		err = b.db.Transaction(func(tx *gorm.DB) error {
			return gormoutbox.Emit(tx.Session(&gorm.Session{DryRun: true}), mustEvent(t, "orders", "order", "3", "x"))
		})
		if err != nil || len(b.events()) != 2 {
			t.Fatalf("DryRun Emit: %v, %d events", err, len(b.events()))
		}
		// Without the plugin.
		plain, err := gorm.Open(dialector(b.tkdb), &gorm.Config{Logger: b.db.Logger})
		if err != nil {
			t.Fatal(err)
		}
		closeDB(t, plain)
		err = plain.Transaction(func(tx *gorm.DB) error { return gormoutbox.Emit(tx, ev) })
		mustErrIs(t, err, gormoutbox.ErrNotRegistered)
	})
}
