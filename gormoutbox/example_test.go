package gormoutbox_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/gormoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxtest"
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

// In a service's own test: package outboxtest asserts what a save
// recorded, inside the transaction through tx and after the commit through
// db. It imports no GORM.
// t is the test's *testing.T; here a stand-in that prints failures.
func Example_outboxtest() {
	ctx := context.Background()
	db, drop := exampleGORM() // your test database, with the outbox migrated and the plugin registered
	defer drop()
	t := printTB{}
	if err := db.AutoMigrate(&ShopOrder{}); err != nil {
		log.Fatal(err)
	}

	order := ShopOrder{Total: 1250}
	err := db.Transaction(func(tx *gorm.DB) error {
		order.Place()
		if err := tx.Create(&order).Error; err != nil {
			return err
		}
		// Before the commit: the transaction's own view.
		outboxtest.RequireEvent(ctx, t, tx, outboxtest.Want{Type: "order.placed", AggregateID: fmt.Sprint(order.ID)})
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	e := outboxtest.RequireEvent(ctx, t, db, outboxtest.Want{
		Topic: "orders", AggregateType: "shop_order", Type: "order.placed",
		AggregateID: fmt.Sprint(order.ID), Payload: outboxtest.JSON(`{"total": 1250}`),
	})
	fmt.Println(e.Type, e.AggregateType, e.State)
	// Output: order.placed shop_order pending
}

// printTB stands for a test's *testing.T in the Examples: it prints a
// failure.
type printTB struct{}

func (printTB) Helper()                           {}
func (printTB) Fatalf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// exampleGORM opens GORM on a fresh schema with the outbox migrated and
// the plugin registered, and returns how to drop the schema.
func exampleGORM() (*gorm.DB, func()) {
	s, drop, err := testkit.ExampleOutbox("gormoutbox")
	if err != nil {
		log.Fatal(err)
	}
	db, err := gorm.Open(postgres.Open(s.URL), &gorm.Config{Logger: logger.Discard})
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
	return db, func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
		drop()
	}
}
