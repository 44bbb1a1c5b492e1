package entoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/txoutbox/txoutbox/entoutbox"
	"github.com/txoutbox/txoutbox/internal/entest" // stands for your generated package, ent
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxtest"
)

// In a service's own test: package outboxtest asserts what a mutation
// recorded, through the *sql.DB the ent client was opened on, once the
// transaction committed, and decodes the change event's payload. It
// imports no ent. (An *ent.Tx generated with ent's sql/execquery feature
// has QueryContext, and can be passed itself to read before the commit.)
// t is the test's *testing.T; here a stand-in that prints failures.
func Example_outboxtest() {
	ctx := context.Background()
	db, client, drop := exampleEnt() // your test database, with the outbox migrated
	defer drop()
	t := printTB{}

	var id int
	err := entoutbox.WithTx(ctx, client, func(tx *entest.Tx) error {
		o, err := tx.Order.Create().SetTotal(1250).Save(ctx)
		if err == nil {
			id = o.ID
		}
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	e := outboxtest.RequireEvent(ctx, t, db, outboxtest.Want{Topic: "orders", Type: "order.created", AggregateID: fmt.Sprint(id)})
	change := outboxtest.Payload[entoutbox.ChangePayload](t, e)
	fmt.Println(e.Type, e.AggregateType, change.Fields["total"], change.Fields["status"])
	outboxtest.RequireNoEvent(ctx, t, db, outboxtest.Want{Type: "order.updated"})
	// Output: order.created order 1250 placed
}

// printTB stands for a test's *testing.T in the Examples: it prints a
// failure.
type printTB struct{}

func (printTB) Helper()                           {}
func (printTB) Fatalf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// exampleEnt opens an ent client on a fresh schema with the outbox and the
// ent tables, and returns the *sql.DB under it and how to drop the schema.
func exampleEnt() (*sql.DB, *entest.Client, func()) {
	s, drop, err := testkit.ExampleOutbox("entoutbox")
	if err != nil {
		log.Fatal(err)
	}
	client := entest.NewClient(entest.Driver(entsql.OpenDB(dialect.Postgres, s.SQL)))
	schemaCreate.Lock()
	err = client.Schema.Create(context.Background())
	schemaCreate.Unlock()
	if err != nil {
		log.Fatal(err)
	}
	return s.SQL, client, drop
}
