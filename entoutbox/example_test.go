package entoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/txoutbox/txoutbox/entoutbox"
	"github.com/txoutbox/txoutbox/internal/entest" // stands for your generated package, ent
	_ "github.com/txoutbox/txoutbox/internal/entest/runtime"
	"github.com/txoutbox/txoutbox/outboxtest"
)

// In a service's own test: package outboxtest asserts what a mutation
// recorded, inside the transaction through the *ent.Tx and after the
// commit through the client, and decodes the change event's payload. It
// imports no ent: it reads through a method entoutboxext generates.
// t is the test's *testing.T; here a stand-in that prints failures.
func Example_outboxtest() {
	ctx := context.Background()
	db, client := exampleEnt() // your test database, with the outbox migrated
	t := printTB{}

	var id int
	err := entoutbox.WithTx(ctx, client, func(tx *entest.Tx) error {
		o, err := tx.Order.Create().SetTotal(1250).Save(ctx)
		if err != nil {
			return err
		}
		id = o.ID
		// Before the commit: the transaction's own view.
		outboxtest.RequireEvent(ctx, t, tx, outboxtest.Want{Type: "order.created", AggregateID: fmt.Sprint(id)})
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	e := outboxtest.RequireEvent(ctx, t, client, outboxtest.Want{Topic: "orders", Type: "order.created", AggregateID: fmt.Sprint(id)})
	change := outboxtest.Payload[entoutbox.ChangePayload](t, e)
	fmt.Println(e.Type, e.AggregateType, change.Fields["total"], change.Fields["status"])
	outboxtest.RequireNoEvent(ctx, t, db, outboxtest.Want{Type: "order.updated"})
	// Prints: order.created order 1250 placed
}

// printTB stands for a test's *testing.T in the Examples: it prints a
// failure.
type printTB struct{}

func (printTB) Helper()                           {}
func (printTB) Fatalf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// exampleEnt opens an ent client on your test database, with the outbox
// and the ent tables, and returns the *sql.DB under it. This module
// imports no database driver, so that a service on either database gets
// only its own; the Examples here are compiled, not run, and their
// runnable copies are in the repository's integration/dbtests/entoutbox.
func exampleEnt() (*sql.DB, *entest.Client) {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL")) // with _ "github.com/jackc/pgx/v5/stdlib" imported
	if err != nil {
		log.Fatal(err)
	}
	return db, entest.NewClient(entest.Driver(entsql.OpenDB(dialect.Postgres, db)))
}
