package relaytest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/relaytest"
)

// billingHandler is the consumer under test.
func billingHandler(msg *message.Message) error {
	var placed struct {
		Total int64 `json:"total"`
	}
	if err := json.Unmarshal(msg.Payload, &placed); err != nil {
		return err
	}
	fmt.Printf("bill order %s: %d\n", msg.Metadata.Get(txoutbox.HeaderAggregateID), placed.Total)
	return nil
}

// shippingHandler is another consumer under test.
func shippingHandler(msg *message.Message) error {
	fmt.Printf("ship order %s\n", msg.Metadata.Get(txoutbox.HeaderAggregateID))
	return nil
}

// A test drains what its code wrote through the relay, with no broker and
// no sleep, and hands what the relay published to its consumer.
func Example() {
	ctx := context.Background()
	db, drop := exampleDB() // your test database, with the outbox migrated
	defer drop()
	record(ctx, db, "42", "order.placed", "order.paid") // the code under test

	pub := relaytest.NewPublisher()
	pub.Fail(relaytest.Failure{Topic: "orders", Times: 1}) // one outage: the relay retries
	if err := relaytest.Drain(ctx, db, pub, relay.Config{}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("refused once:", len(pub.Refused()))
	handlers := map[string]func(*message.Message) error{"order.placed": billingHandler, "order.paid": shippingHandler}
	for _, m := range pub.Topic("orders") { // one aggregate's events, in the order written
		fmt.Print(m.Key, " ", m.EventType(), ": ")
		if err := handlers[m.EventType()](m.Message); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// refused once: 1
	// 42 order.placed: bill order 42: 1250
	// 42 order.paid: ship order 42
}

// An event the broker refuses for its own fault goes dead, and Drain says
// which.
func ExampleDrain_dead() {
	ctx := context.Background()
	db, drop := exampleDB()
	defer drop()
	record(ctx, db, "42", "order.placed")

	pub := relaytest.NewPublisher()
	pub.Fail(relaytest.Failure{EventType: "order.placed", Permanent: true})
	err := relaytest.Drain(ctx, db, pub, relay.Config{MaxAttempts: 2})
	fmt.Println(err)
	// Output:
	// relaytest: events went dead: 1:
	//     #1 orders order.placed order/42 dead attempts=2 payload={"total":1250}: publish event 00000000-0000-7000-8000-000000000001 to orders: relaytest: publish refused (event 00000000-0000-7000-8000-000000000001 to orders)
}

// record commits events of types for the order id, with ids
// 00000000-0000-7000-8000-000000000001 and on, so the output is stable.
func record(ctx context.Context, db *sql.DB, id string, types ...string) {
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{})
	if err != nil {
		log.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	for i, typ := range types {
		ev, err := txoutbox.NewEvent("orders", "order", id, typ, map[string]any{"total": 1250})
		if err != nil {
			log.Fatal(err)
		}
		ev.ID = uuid.MustParse(fmt.Sprintf("00000000-0000-7000-8000-%012d", i+1))
		if err := w.Write(ctx, tx, ev); err != nil {
			log.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}

func exampleDB() (*sql.DB, func()) {
	s, drop, err := testkit.ExampleOutbox("relaytest")
	if err != nil {
		log.Fatal(err)
	}
	return s.SQL, drop
}
