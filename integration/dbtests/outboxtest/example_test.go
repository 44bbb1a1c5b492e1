package outboxtest_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"testing"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxtest"
)

// OrderPlaced is the payload of "order.placed".
type OrderPlaced struct {
	Total int64 `json:"total"`
}

// placeOrder is the code under test: the order and its event, one
// transaction.
func placeOrder(ctx context.Context, tx *sql.Tx, id string, total int64) error {
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{})
	if err != nil {
		return err
	}
	ev, err := txoutbox.NewEvent("orders", "order", id, "order.placed", OrderPlaced{Total: total})
	if err != nil {
		return err
	}
	return w.Write(ctx, tx, ev)
}

// A test asserts what its code recorded, in the transaction before it
// commits, and decodes the payload into its own type. t is the test's
// *testing.T; here a stand-in that prints failures.
func Example() {
	ctx := context.Background()
	db := exampleDB() // your test database, with the outbox migrated
	t := printTB{}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if err := placeOrder(ctx, tx, "42", 1250); err != nil {
		log.Fatal(err)
	}

	e := outboxtest.RequireEvent(ctx, t, tx, outboxtest.Want{Topic: "orders", Type: "order.placed", AggregateID: "42"})
	fmt.Println(e.Type, e.AggregateID, e.State)
	fmt.Println(outboxtest.Payload[OrderPlaced](t, e).Total)
	outboxtest.RequireNoEvent(ctx, t, db, outboxtest.Want{}) // not committed yet
	// Output:
	// order.placed 42 pending
	// 1250
}

// A failure shows what the outbox holds instead, and why each event does
// not match.
func ExampleRequireEvents() {
	ctx := context.Background()
	db := exampleDB()
	t := printTB{}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if err := placeOrder(ctx, tx, "42", 1250); err != nil {
		log.Fatal(err)
	}

	outboxtest.RequireEvents(ctx, t, tx,
		outboxtest.Want{AggregateID: "42", Type: "order.placed", Payload: OrderPlaced{Total: 1250}},
		outboxtest.Want{AggregateID: "42", Type: "order.paid"},
	)
	// Output:
	// outboxtest: want 2 events in this order:
	//     1. {AggregateID: "42", Type: "order.placed", Payload: {"total":1250}}
	//     2. {AggregateID: "42", Type: "order.paid"}
	// the 1 events matching any of them, in the order written:
	//     #1 orders order.placed order/42 pending payload={"total":1250}
	//     (1 missing)
}

// printTB stands for a test's *testing.T in the Examples: it prints a
// failure.
type printTB struct{}

func (printTB) Helper()                           {}
func (printTB) Fatalf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// exampleDB is a fresh schema with the outbox migrated;
// testkit.ExamplesMain drops it when the Examples have run.
func exampleDB() *sql.DB {
	s, drop, err := testkit.ExampleOutbox("outboxtest")
	if err != nil {
		log.Fatal(err)
	}
	testkit.DropAfterExamples(drop)
	return s.SQL
}

func TestMain(m *testing.M) { testkit.ExamplesMain(m) }
