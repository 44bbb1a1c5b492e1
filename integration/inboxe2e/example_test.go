package inboxe2e

import (
	"context"
	"database/sql"
	"errors"
	"github.com/txoutbox/txoutbox/gormoutbox"
	"log"

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
