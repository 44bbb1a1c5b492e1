package gormoutbox_test

import (
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/gormoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

var errAbort = errors.New("abort")

func TestOuterTransaction(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)

		// Commit: both rows.
		err := b.db.Transaction(func(tx *gorm.DB) error {
			o := Order{Total: 1}
			o.Place()
			if err := tx.Create(&o).Error; err != nil {
				return err
			}
			o.Pay()
			return tx.Save(&o).Error
		})
		if err != nil {
			t.Fatal(err)
		}
		// Rollback: neither.
		err = b.db.Transaction(func(tx *gorm.DB) error {
			o := Order{Total: 2}
			o.Place()
			if err := tx.Create(&o).Error; err != nil {
				return err
			}
			return errAbort
		})
		mustErrIs(t, err, errAbort)
		if n := b.count("orders"); n != 1 {
			t.Fatalf("orders = %d, want 1", n)
		}
		equal(t, "events", b.eventNames(), []string{"order/1/order.placed", "order/1/order.paid"})
	})
}

func TestSavepointRollbackRemovesOnlyItsEvents(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		err := b.db.Transaction(func(tx *gorm.DB) error {
			a := Order{Total: 1}
			a.Place()
			if err := tx.Create(&a).Error; err != nil {
				return err
			}
			inner := tx.Transaction(func(tx2 *gorm.DB) error {
				b := Order{Total: 2}
				b.Place()
				if err := tx2.Create(&b).Error; err != nil {
					return err
				}
				a.Pay()
				if err := tx2.Save(&a).Error; err != nil {
					return err
				}
				return errAbort
			})
			if !errors.Is(inner, errAbort) {
				return inner
			}
			c := Order{Total: 3}
			c.Place()
			return tx.Create(&c).Error
		})
		if err != nil {
			t.Fatal(err)
		}
		// Order 2 and a's payment lived in the rolled-back savepoint.
		equal(t, "events", b.eventNames(), []string{"order/1/order.placed", "order/3/order.placed"})
		var status string
		b.raw.QueryRow(`SELECT status FROM orders WHERE id = 1`).Scan(&status)
		if status != "placed" {
			t.Fatalf("order 1 status = %q, want the savepoint's update rolled back", status)
		}
		if n := b.count("orders"); n != 2 {
			t.Fatalf("orders = %d, want 2", n)
		}
	})
}

func TestOutboxFailureRollsBackModel(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)

		// An invalid event: core validation.
		o := Order{Total: 1}
		o.RecordEvent(badTopicEvent())
		err := b.db.Create(&o).Error
		mustErrIs(t, err, txoutbox.ErrInvalidEvent)
		// A payload that cannot be marshaled.
		o2 := Order{Total: 2}
		o2.Record("order.placed", make(chan int))
		if err := b.db.Create(&o2).Error; err == nil {
			t.Fatal("Create with an unmarshalable payload succeeded")
		}
		// An update whose event is invalid leaves the row as it was.
		ok := Order{Total: 3}
		ok.Place()
		if err := b.db.Create(&ok).Error; err != nil {
			t.Fatal(err)
		}
		ok.Status = "paid"
		ok.RecordEvent(badTopicEvent())
		mustErrIs(t, b.db.Save(&ok).Error, txoutbox.ErrInvalidEvent)
		var status string
		b.raw.QueryRow(b.tkdb.Q(`SELECT status FROM orders WHERE id = $1`), ok.ID).Scan(&status)
		if status != "placed" {
			t.Fatalf("status = %q after a failed outbox write, want placed", status)
		}
		if n := b.count("orders"); n != 1 {
			t.Fatalf("orders = %d, want only the valid one", n)
		}
		equal(t, "events", b.eventNames(), []string{"order/" + itoa(int(ok.ID)) + "/order.placed"})

		// A failing insert: the outbox table is missing.
		table := b.tkdb.Table()
		table.Name = "no_such_outbox"
		missing := setup(t, eng, gormoutbox.Config{Writer: txoutbox.WriterConfig{Table: table}}, nil)
		m := Order{Total: 4}
		m.Place()
		err = missing.db.Create(&m).Error
		if err == nil {
			t.Fatal("Create with a missing outbox table succeeded")
		}
		t.Logf("missing table: %v", err)
		if n := missing.count("orders"); n != 0 {
			t.Fatalf("orders = %d after the outbox insert failed, want 0", n)
		}
		// The same inside the caller's transaction: the error surfaces and
		// the transaction rolls back.
		err = missing.db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(&Note{Text: "before"}).Error; err != nil {
				return err
			}
			m := Order{Total: 5}
			m.Place()
			return tx.Create(&m).Error
		})
		if err == nil {
			t.Fatal("transaction with a failing outbox insert committed")
		}
		if n := missing.count("notes") + missing.count("orders"); n != 0 {
			t.Fatalf("%d rows survived the failed transaction", n)
		}
	})
}

func TestFailedSaveDoesNotLeakEvents(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		if err := b.db.Exec(`ALTER TABLE orders ADD CONSTRAINT total_positive CHECK (total > 0)`).Error; err != nil {
			t.Fatal(err)
		}
		// The model write fails: the events recorded for it are dropped with it.
		o := Order{Total: -1}
		o.Place()
		if err := b.db.Create(&o).Error; err == nil {
			t.Fatal("Create violating a check succeeded")
		}
		if len(o.Pending()) != 0 {
			t.Fatalf("pending after a failed save = %v, want none", o.Pending())
		}
		o.ID = 0
		o.Total = 5 // a later, unrelated save of the same model
		if err := b.db.Create(&o).Error; err != nil {
			t.Fatal(err)
		}
		// The transaction around a successful save rolls back later: the events
		// went with it, and a second attempt writes only what it records.
		p := Order{Total: 7}
		_ = b.db.Transaction(func(tx *gorm.DB) error {
			p.Place()
			if err := tx.Create(&p).Error; err != nil {
				return err
			}
			return errAbort
		})
		p.ID = 0
		if err := b.db.Create(&p).Error; err != nil {
			t.Fatal(err)
		}
		if n := b.count("outbox"); n != 0 {
			t.Fatalf("outbox rows = %d: events of failed attempts leaked into later saves", n)
		}
		// The retry rule: rerun the domain code that records.
		r := Order{Total: 9}
		for attempt := 0; attempt < 2; attempt++ {
			r.ID = 0
			err := b.db.Transaction(func(tx *gorm.DB) error {
				r.Place()
				if err := tx.Create(&r).Error; err != nil {
					return err
				}
				if attempt == 0 {
					return errAbort
				}
				return nil
			})
			if attempt == 1 && err != nil {
				t.Fatal(err)
			}
		}
		equal(t, "events", b.eventNames(), []string{"order/" + itoa(int(r.ID)) + "/order.placed"})
	})
}

// A statement refused with ErrNoTransaction before any SQL runs empties the
// recorder too, like any save that was attempted: the retry rule is to rerun
// the domain code that records, so nothing may linger for a later save.
func TestRefusedSaveEmptiesTheRecorder(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		o := Order{Total: 3}
		o.Place()
		err := b.db.Session(&gorm.Session{SkipDefaultTransaction: true}).Create(&o).Error
		if !errors.Is(err, gormoutbox.ErrNoTransaction) {
			t.Fatalf("Create outside a transaction = %v, want ErrNoTransaction", err)
		}
		if len(o.Pending()) != 0 {
			t.Fatalf("pending after a refused save = %v, want none", o.Pending())
		}
		if n := b.count("orders"); n != 0 {
			t.Fatalf("%d orders written by a refused save", n)
		}
	})
}
