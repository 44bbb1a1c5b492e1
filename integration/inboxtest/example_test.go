package inboxtest

import (
	"context"
	"database/sql"
	"errors"
	"github.com/txoutbox/txoutbox/gormoutbox"
	"log"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/txoutbox/txoutbox/inbox"
)

// A Watermill router whose handler credits an account once per event, however
// often Kafka delivers it.
func Example_watermill() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	mw, err := ib.Middleware(inbox.MiddlewareConfig{Consumer: "billing", DB: db})
	if err != nil {
		log.Fatal(err)
	}
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers:       []string{"localhost:9092"},
		Unmarshaler:   kafka.DefaultMarshaler{},
		ConsumerGroup: "billing",
	}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	router.AddMiddleware(mw)
	router.AddConsumerHandler("billing", "payments", sub, func(msg *message.Message) error {
		tx, _ := inbox.TxFromContext(msg.Context())
		_, err := tx.ExecContext(msg.Context(),
			`UPDATE accounts SET balance = balance + 10 WHERE id = $1`, msg.Metadata.Get("aggregate_id"))
		return err
	})
	if err := router.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

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

// Process on a GORM transaction: the inbox row and the update commit or roll
// back together.
func ExampleInbox_Process_gorm() {
	ctx := context.Background()
	var gdb *gorm.DB // from gorm.Open(postgres.Open(dsn))
	ib, err := inbox.New(inbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	eventID := uuid.MustParse("0190f1e2-7b3c-7def-8a12-3456789abcde")
	err = gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		ex, err := gormoutbox.Execer(tx)
		if err != nil {
			return err
		}
		_, err = ib.Process(ctx, ex, "billing", eventID, func() error {
			return tx.Exec(`UPDATE accounts SET balance = balance + 10 WHERE id = ?`, "acct-1").Error
		})
		return err
	})
	if errors.Is(err, inbox.ErrNotInTransaction) {
		log.Fatal("Process needs the *gorm.DB of a transaction")
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
