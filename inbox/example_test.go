package inbox_test

import (
	"context"
	"database/sql"
	"log"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox/inbox"
)

// Run opens and commits the transaction itself.
func ExampleInbox_Run() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	eventID := uuid.MustParse("0190f1e2-7b3c-7def-8a12-3456789abcde") // from the message
	processed, err := ib.Run(ctx, db, "billing", eventID, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + 10 WHERE id = $1`, "acct-1")
		return err
	})
	if err != nil {
		log.Fatal(err) // nack: the event is processed again when redelivered
	}
	if !processed {
		log.Printf("event %s was processed before; skipped", eventID)
	}
}

// Prune on a schedule, with a window longer than any redelivery.
func ExampleInbox_Prune() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	// Kafka keeps 7 days, the outbox keeps published rows 3 days: remember
	// ids for 14.
	const window = 14 * 24 * time.Hour
	for range time.Tick(time.Hour) {
		n, err := ib.Prune(ctx, db, window)
		if err != nil {
			log.Printf("prune inbox: %v (deleted %d)", err, n)
		}
	}
}
