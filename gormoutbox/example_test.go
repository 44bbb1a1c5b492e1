package gormoutbox_test

import (
	"fmt"
	"log"
	"os"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/gormoutbox"
)

// ShopOrder is a model that records domain events.
type ShopOrder struct {
	ID     uint
	Total  int64 // cents
	Status string

	gormoutbox.Events `gorm:"-"`
}

// Place is domain code: it changes the order and records what happened.
func (o *ShopOrder) Place() {
	o.Status = "placed"
	o.Record("order.placed", map[string]any{"total": o.Total})
}

func Example() {
	db, err := gorm.Open(postgres.Open(os.Getenv("DATABASE_URL")), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	p, err := gormoutbox.New(gormoutbox.Config{DefaultTopic: "orders"})
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Use(p); err != nil {
		log.Fatal(err)
	}

	order := ShopOrder{Total: 1250}
	order.Place()
	// The order row and its order.placed outbox row commit together; the
	// event's aggregate id is the order's new primary key.
	if err := db.Create(&order).Error; err != nil {
		log.Fatal(err)
	}
}

// Emit writes events on the transaction of db.Transaction, for statements
// that have no model instances, such as a bulk update.
func ExampleEmit() {
	var db *gorm.DB // opened, with the plugin registered
	err := db.Transaction(func(tx *gorm.DB) error {
		var expired []ShopOrder
		if err := tx.Model(&expired).Clauses(clause.Returning{}).Where("status = ? AND created_at < now() - interval '1 day'", "placed").
			Update("status", "expired").Error; err != nil {
			return err
		}
		events := make([]txoutbox.Event, 0, len(expired))
		for _, o := range expired {
			ev, err := txoutbox.NewEvent("orders", "shop_order", fmt.Sprint(o.ID), "order.expired", o)
			if err != nil {
				return err
			}
			events = append(events, ev)
		}
		return gormoutbox.Emit(tx, events...)
	})
	if err != nil {
		log.Fatal(err)
	}
}
