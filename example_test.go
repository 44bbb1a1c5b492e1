package txoutbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/txoutbox/txoutbox"
)

// Write an event in the same transaction as the business change: both
// commit, or neither does.
func ExampleWriter_Write() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/app") // with _ "github.com/jackc/pgx/v5/stdlib" imported
	if err != nil {
		log.Fatal(err)
	}
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{}) // table "outbox"
	if err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	var orderID int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO orders (total) VALUES ($1) RETURNING id`, 1250).Scan(&orderID); err != nil {
		log.Fatal(err)
	}
	ev, err := txoutbox.NewEvent("orders", "order", fmt.Sprint(orderID), "order.placed", map[string]any{"total": 1250})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Write(ctx, tx, ev); err != nil {
		log.Fatal(err) // an invalid event matches txoutbox.ErrInvalidEvent; tx is still yours
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("order and event committed; event id", ev.ID)
}

// Validation names the event and the field it rejects.
func ExampleEvent_Validate() {
	ev := txoutbox.Event{Topic: "orders/eu", AggregateID: "42", Type: "order.placed", Payload: []byte(`{}`)}
	fmt.Println(ev.Validate())
	// Output: txoutbox: invalid event 0: Topic: "orders/eu" has characters outside [a-zA-Z0-9._-]
}

// A reminder a day after the order, written with it: the relay publishes
// it no earlier than NotBefore. Its own aggregate id keeps the order's
// later events from waiting behind it; a time beyond MaxNotBeforeDelay is
// refused.
func ExampleEvent_notBefore() {
	ev, err := txoutbox.NewEvent("reminders", "order", "reminder-42", "order.reminder", map[string]int{"order": 42})
	if err != nil {
		log.Fatal(err)
	}
	ev.NotBefore = time.Now().Add(24 * time.Hour)
	fmt.Println(ev.Validate())
	ev.NotBefore = time.Now().Add(2 * txoutbox.MaxNotBeforeDelay)
	fmt.Println(errors.Is(ev.Validate(), txoutbox.ErrInvalidEvent))
	// Output:
	// <nil>
	// true
}

// ReadStats is the health check: alert on lag, not on relay liveness.
func ExampleReadStats() {
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/app") // with _ "github.com/jackc/pgx/v5/stdlib" imported
	if err != nil {
		log.Fatal(err)
	}
	s, err := txoutbox.ReadStats(context.Background(), db, txoutbox.Table{})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("backlog=%d lag=%s dead=%d", s.Backlog, s.Lag, s.Dead)
}
