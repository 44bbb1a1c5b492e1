package entoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"path/filepath"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/txoutbox/txoutbox/entoutbox"
	"github.com/txoutbox/txoutbox/internal/entest" // stands for your generated package, ent
	_ "github.com/txoutbox/txoutbox/internal/entest/runtime"
	"github.com/txoutbox/txoutbox/internal/testkit"
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
	// Output: order.created order 1250 placed
}

// printTB stands for a test's *testing.T in the Examples: it prints a
// failure.
type printTB struct{}

func (printTB) Helper()                           {}
func (printTB) Fatalf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// exampleEnt opens an ent client on a fresh schema with the outbox and the
// ent tables, and returns the *sql.DB under it; testkit.ExamplesMain drops
// the schema when the Examples have run.
func exampleEnt() (*sql.DB, *entest.Client) {
	s, drop, err := testkit.ExampleOutbox("entoutbox")
	if err != nil {
		log.Fatal(err)
	}
	testkit.DropAfterExamples(drop)
	client := entest.NewClient(entest.Driver(entsql.OpenDB(dialect.Postgres, s.SQL)))
	if err = client.Schema.Create(context.Background()); err != nil {
		log.Fatal(err)
	}
	return s.SQL, client
}

func TestMain(m *testing.M) { testkit.ExamplesMain(m) }

// entoutbox's Examples show their output in a "Prints:" comment, and its
// module does not run them; this package's copies run, and must be theirs.
func TestThePackagesExamplesAreTheseOnes(t *testing.T) {
	testkit.SameExamples(t, filepath.Join("..", "..", "..", "entoutbox", "example_test.go"), "example_test.go")
}
