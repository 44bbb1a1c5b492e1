package gormoutbox_test

import (
	"context"
	"fmt"
	"log"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/gormoutbox"
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
	db, err := gorm.Open(dialector, &gorm.Config{}) // postgres.Open(dsn) or mysql.Open(dsn) of GORM's drivers
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
	db := exampleGORM() // your test database, with the outbox migrated and the plugin registered
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
	// Prints: order.placed shop_order pending
}

// printTB stands for a test's *testing.T in the Examples: it prints a
// failure.
type printTB struct{}

func (printTB) Helper()                           {}
func (printTB) Fatalf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// dialector is your database's GORM driver: postgres.Open(dsn) of
// gorm.io/driver/postgres, or mysql.Open(dsn) of gorm.io/driver/mysql.
// This module imports neither, so that a service on either database gets
// only its own; the Examples here are compiled, not run, and the one that
// prints runs in the repository's integration/dbtests/gormoutbox.
var dialector gorm.Dialector

// exampleGORM opens GORM on your test database, with the outbox migrated,
// and registers the plugin.
func exampleGORM() *gorm.DB {
	db, err := gorm.Open(dialector, &gorm.Config{Logger: logger.Discard})
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
	return db
}
