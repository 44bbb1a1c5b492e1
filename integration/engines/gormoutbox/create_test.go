package gormoutbox_test

import (
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/gormoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

func TestCreateSingle(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		o := Order{Total: 1250}
		o.Place()
		if err := b.db.Create(&o).Error; err != nil {
			t.Fatal(err)
		}
		if len(o.Pending()) != 0 {
			t.Fatalf("pending after a successful save: %v", o.Pending())
		}
		evs := b.events()
		if len(evs) != 1 {
			t.Fatalf("events = %v, want 1", evs)
		}
		e := evs[0]
		if e.Topic != "orders" || e.AggregateType != "order" || e.AggregateID != "1" || e.Type != "order.placed" || e.Payload["total"] != 1250.0 {
			t.Fatalf("event = %+v", e)
		}
		b.sameTx("orders", o.ID, "order")

		// Saving again without recording anything writes nothing more.
		o.Total = 1300
		if err := b.db.Save(&o).Error; err != nil {
			t.Fatal(err)
		}
		if n := b.count("outbox"); n != 1 {
			t.Fatalf("outbox rows after a save with no events = %d, want 1", n)
		}
	})
}

func TestCreateSliceShapes(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)

		values := []Order{{Total: 1}, {Total: 2}}
		for i := range values {
			values[i].Place()
		}
		if err := b.db.Create(&values).Error; err != nil {
			t.Fatal(err)
		}
		pointers := []*Order{{Total: 3}, {Total: 4}}
		for _, o := range pointers {
			o.Place()
		}
		if err := b.db.Create(&pointers).Error; err != nil {
			t.Fatal(err)
		}
		batched := make([]Order, 5)
		for i := range batched {
			batched[i].Total = int64(10 + i)
			batched[i].Place()
		}
		if err := b.db.CreateInBatches(&batched, 2).Error; err != nil {
			t.Fatal(err)
		}
		var want []string
		for id := 1; id <= 9; id++ {
			want = append(want, "order/"+itoa(id)+"/order.placed")
		}
		equal(t, "events", b.eventNames(), want)
		for id := uint(1); id <= 9; id++ {
			b.sameTx("orders", id, "order")
		}
		for i := range batched {
			if len(batched[i].Pending()) != 0 {
				t.Fatalf("batched[%d] still has pending events", i)
			}
		}
		// The payload was taken when recorded: each order has its own total.
		for _, e := range b.events() {
			if e.Payload["total"] == nil {
				t.Fatalf("event %v lost its payload", e)
			}
		}
	})
}

func TestCreateInBatchesRollsBackAllBatches(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		batched := make([]Order, 4)
		for i := range batched {
			batched[i].Place()
		}
		batched[3].RecordEvent(badTopicEvent()) // fails the last batch
		err := b.db.CreateInBatches(&batched, 2).Error
		if err == nil {
			t.Fatal("CreateInBatches with an invalid event succeeded")
		}
		if n, m := b.count("orders"), b.count("outbox"); n != 0 || m != 0 {
			t.Fatalf("after a failed batch: %d orders, %d events; want none", n, m)
		}
	})
}

func TestHookRecordsWithPrimaryKey(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		inv := Invoice{Amount: 700}
		if err := b.db.Create(&inv).Error; err != nil {
			t.Fatal(err)
		}
		evs := b.events()
		if len(evs) != 1 || evs[0].Type != "invoice.issued" || evs[0].AggregateID != itoa(int(inv.ID)) || evs[0].Payload["id"] != float64(inv.ID) {
			t.Fatalf("events = %+v, want one invoice.issued carrying id %d", evs, inv.ID)
		}
		b.sameTx("invoices", inv.ID, "invoice")
	})
}

func TestNestedHasMany(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		o := Order{Total: 50, Items: []Item{{SKU: "a"}, {SKU: "b"}}}
		o.Place()
		for i := range o.Items {
			o.Items[i].Record("item.added", map[string]string{"sku": o.Items[i].SKU})
		}
		if err := b.db.Create(&o).Error; err != nil {
			t.Fatal(err)
		}
		// GORM saves has-many children inside the parent's create, before the
		// parent's AfterCreate, so their events come first.
		equal(t, "events", b.eventNames(), []string{"item/1/item.added", "item/2/item.added", "order/1/order.placed"})
		b.sameTx("items", 1, "item")
		b.sameTx("items", 2, "item")
		b.sameTx("orders", 1, "order")
		if b.writerIDs() {
			var orderXmin, itemXmin string
			b.raw.QueryRow(`SELECT xmin::text FROM orders WHERE id = 1`).Scan(&orderXmin)
			b.raw.QueryRow(`SELECT xmin::text FROM items WHERE id = 1`).Scan(&itemXmin)
			if orderXmin != itemXmin {
				t.Fatal("order and items in different transactions")
			}
		}

		// Save of the loaded parent with a new child: the child is created by
		// the nested statement and its event written once.
		o.Items = append(o.Items, Item{SKU: "c"})
		o.Items[2].Record("item.added", map[string]string{"sku": "c"})
		o.Pay()
		if err := b.db.Save(&o).Error; err != nil {
			t.Fatal(err)
		}
		equal(t, "events", b.eventNames(), []string{"item/1/item.added", "item/2/item.added", "order/1/order.placed",
			"item/3/item.added", "order/1/order.paid"})
	})
}

func TestDryRunWritesNothing(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		o := Order{Total: 5}
		o.Place()
		dry := b.db.Session(&gorm.Session{DryRun: true})
		if err := dry.Create(&o).Error; err != nil {
			t.Fatal(err)
		}
		o.ID = 7
		if err := dry.Model(&o).Updates(map[string]any{"status": "x"}).Error; err != nil {
			t.Fatal(err)
		}
		if err := dry.Delete(&o).Error; err != nil {
			t.Fatal(err)
		}
		if err := dry.Create(&Product{Name: "p"}).Error; err != nil {
			t.Fatal(err)
		}
		if err := dry.Where("price > 0").Delete(&Product{}).Error; err != nil {
			t.Fatal(err)
		}
		if n, m := b.count("orders"), b.count("outbox"); n != 0 || m != 0 {
			t.Fatalf("DryRun wrote %d orders and %d events", n, m)
		}
		if len(o.Pending()) != 1 {
			t.Fatalf("DryRun consumed the recorded events: %v", o.Pending())
		}
		sql := b.db.ToSQL(func(tx *gorm.DB) *gorm.DB { return tx.Create(&Order{Total: 9}) })
		if sql == "" {
			t.Fatal("ToSQL returned nothing with the plugin registered")
		}
		// Under SkipDefaultTransaction too (ToSQL's own session), DryRun is not refused.
		skip := b.db.Session(&gorm.Session{SkipDefaultTransaction: true, DryRun: true})
		if err := skip.Create(&o).Error; err != nil {
			t.Fatalf("DryRun without a transaction: %v", err)
		}
	})
}

// An event recorded with a NotBefore keeps it: the row is written
// scheduled (not_before, retry_at), in the model's transaction; a bad one
// fails the save before anything is written.
func TestRecordEventWithNotBefore(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		later := time.Now().Add(24 * time.Hour)
		o := Order{}
		o.Place()
		o.RecordEvent(txoutbox.Event{Type: "order.reminder", Payload: []byte(`{}`), NotBefore: later})
		if err := b.db.Create(&o).Error; err != nil {
			t.Fatal(err)
		}
		var scheduled int
		query := `SELECT count(*) FROM outbox WHERE event_type = 'order.reminder' AND not_before > now() + interval '23 hours'
        AND retry_at = not_before`
		if eng == testkit.MySQL {
			query = `SELECT count(*) FROM outbox WHERE event_type = 'order.reminder' AND not_before > UTC_TIMESTAMP(6) + INTERVAL 23 HOUR
        AND retry_at = not_before`
		}
		if err := b.raw.QueryRow(query).Scan(&scheduled); err != nil || scheduled != 1 {
			t.Fatalf("scheduled reminder rows = %d, %v; want 1", scheduled, err)
		}
		bad := Order{}
		bad.Place()
		bad.RecordEvent(txoutbox.Event{Type: "order.reminder", Payload: []byte(`{}`), NotBefore: time.Now().Add(2 * txoutbox.MaxNotBeforeDelay)})
		if err := b.db.Create(&bad).Error; !errors.Is(err, txoutbox.ErrInvalidEvent) {
			t.Fatalf("save with a NotBefore beyond MaxNotBeforeDelay = %v, want ErrInvalidEvent", err)
		}
		if n := b.count("orders"); n != 1 {
			t.Fatalf("%d orders after the refused save, want 1", n)
		}
	})
}
