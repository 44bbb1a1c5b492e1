package kafkapub_test

import (
	"context"
	"database/sql"
	"log"
	"os/signal"
	"syscall"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// Run a relay until SIGINT or SIGTERM; start as many as you like, in one
// process or many.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	db.SetMaxIdleConns(8)
	pub, err := kafkapub.NewPublisher([]string{"kafka-1:9092", "kafka-2:9092"}, kafkapub.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	r, err := relay.New(db, pub, relay.Config{}) // every zero field takes its default
	if err != nil {
		log.Fatal(err) // a bad Config matches relay.ErrInvalidConfig
	}
	if err := r.Run(ctx); err != nil { // returns after a clean shutdown
		log.Fatal(err)
	}
}
