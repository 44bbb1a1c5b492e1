package gormoutbox_test

import (
	"testing"

	"github.com/txoutbox/txoutbox/gormoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

func TestSaveInsertUpdateAndMissingKey(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)

		// Save of a new model: the create chain.
		o := Order{Total: 10}
		o.Place()
		if err := b.db.Save(&o).Error; err != nil {
			t.Fatal(err)
		}
		// Save of an existing row: the update chain.
		o.Pay()
		if err := b.db.Save(&o).Error; err != nil {
			t.Fatal(err)
		}
		b.sameTx("orders", o.ID, "order")
		// Save with a key that does not exist: an update of 0 rows, then a
		// create. The event must be written once, by the create.
		missing := Order{ID: 4242, Total: 99}
		missing.Place()
		if err := b.db.Save(&missing).Error; err != nil {
			t.Fatal(err)
		}
		equal(t, "events", b.eventNames(), []string{"order/1/order.placed", "order/1/order.paid", "order/4242/order.placed"})
		b.sameTx("orders", 4242, "order")

		// The same for change events: exactly one "created", no "updated".
		p := Product{ID: 77, Name: "lamp", Price: 3}
		if err := b.db.Save(&p).Error; err != nil {
			t.Fatal(err)
		}
		p.Price = 4
		if err := b.db.Save(&p).Error; err != nil {
			t.Fatal(err)
		}
		got := b.eventNames()[3:]
		equal(t, "change events", got, []string{"product/77/product.created", "product/77/product.updated"})
	})
}

func TestUpdatesAndDeleteOfLoadedModel(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		o := Order{Total: 10}
		o.Place()
		if err := b.db.Create(&o).Error; err != nil {
			t.Fatal(err)
		}
		var loaded Order
		if err := b.db.First(&loaded, o.ID).Error; err != nil {
			t.Fatal(err)
		}
		loaded.Pay()
		if err := b.db.Model(&loaded).Updates(map[string]any{"status": loaded.Status}).Error; err != nil {
			t.Fatal(err)
		}
		b.sameTx("orders", o.ID, "order")
		loaded.Cancel()
		if err := b.db.Model(&loaded).Update("status", loaded.Status).Error; err != nil {
			t.Fatal(err)
		}
		loaded.Record("order.deleted", map[string]any{"id": loaded.ID})
		if err := b.db.Delete(&loaded).Error; err != nil {
			t.Fatal(err)
		}
		equal(t, "events", b.eventNames(), []string{"order/1/order.placed", "order/1/order.paid", "order/1/order.cancelled", "order/1/order.deleted"})
		if n := b.count("orders"); n != 0 {
			t.Fatalf("orders = %d after delete", n)
		}

		// An update or delete that matches no row writes nothing and keeps the
		// events recorded (nothing happened to announce).
		gone := Order{ID: 999}
		gone.Pay()
		if err := b.db.Model(&gone).Updates(map[string]any{"status": "paid"}).Error; err != nil {
			t.Fatal(err)
		}
		if err := b.db.Delete(&gone).Error; err != nil {
			t.Fatal(err)
		}
		if n := b.count("outbox"); n != 4 {
			t.Fatalf("outbox rows = %d after statements matching nothing, want 4", n)
		}
		if len(gone.Pending()) != 1 {
			t.Fatalf("pending = %v, want the paid event kept", gone.Pending())
		}
	})
}

func TestChangeEvents(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		p := Product{Name: "lamp", Price: 1200}
		if err := b.db.Create(&p).Error; err != nil {
			t.Fatal(err)
		}
		if err := b.db.Model(&p).Updates(map[string]any{"price": 1500}).Error; err != nil {
			t.Fatal(err)
		}
		if err := b.db.Delete(&p).Error; err != nil {
			t.Fatal(err)
		}
		many := []Product{{Name: "a"}, {Name: "b"}}
		if err := b.db.Create(&many).Error; err != nil {
			t.Fatal(err)
		}
		evs := b.events()
		want := []string{"catalog/product/1/product.created", "catalog/product/1/product.updated", "catalog/product/1/product.deleted",
			"catalog/product/2/product.created", "catalog/product/3/product.created"}
		var got []string
		for _, e := range evs {
			got = append(got, e.String())
		}
		equal(t, "change events", got, want)
		if evs[0].Payload["Name"] != "lamp" || evs[0].Payload["Price"] != 1200.0 || evs[0].Payload["ID"] != 1.0 {
			t.Fatalf("created payload = %v", evs[0].Payload)
		}
		if evs[1].Payload["Price"] != 1500.0 {
			t.Fatalf("updated payload = %v, want the model after the update", evs[1].Payload)
		}
		// Plain models are untouched.
		if err := b.db.Create(&Note{Text: "hi"}).Error; err != nil {
			t.Fatal(err)
		}
		if n := b.count("outbox"); n != len(want) {
			t.Fatalf("a plain model wrote events: %d rows", n)
		}
	})
}
