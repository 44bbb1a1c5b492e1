package gormoutbox_test

import (
	"context"
	"fmt"
	"log"
	"path/filepath"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

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
	// Output: order.placed shop_order pending
}

// printTB stands for a test's *testing.T in the Examples: it prints a
// failure.
type printTB struct{}

func (printTB) Helper()                           {}
func (printTB) Fatalf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// exampleGORM opens GORM on a fresh schema with the outbox migrated and
// the plugin registered; testkit.ExamplesMain drops the schema when the
// Examples have run.
func exampleGORM() *gorm.DB {
	s, drop, err := testkit.ExampleOutbox("gormoutbox")
	if err != nil {
		log.Fatal(err)
	}
	testkit.DropAfterExamples(drop)
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
	return db
}

func TestMain(m *testing.M) { testkit.ExamplesMain(m) }

// gormoutbox's Examples show their output in a "Prints:" comment, and its
// module does not run them; this package's copies run, and must be theirs.
func TestThePackagesExamplesAreTheseOnes(t *testing.T) {
	testkit.SameExamples(t, filepath.Join("..", "..", "..", "gormoutbox", "example_test.go"), "example_test.go")
}
