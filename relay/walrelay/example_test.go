package walrelay_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay/walrelay"
)

// Stream the outbox from the WAL and publish it, here through Watermill's
// in-process gochannel (use kafkapub.NewPublisher for Kafka), until SIGINT.
func Example() {
	pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	// replication=database is added to the connection string for the stream.
	r, err := walrelay.New(os.Getenv("DATABASE_URL"), pub, walrelay.Config{Table: txoutbox.Table{Schema: "app"}})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := r.Run(ctx); err != nil {
		log.Fatal(err) // walrelay.ErrUnsupported, walrelay.ErrSlotLost, ...
	}
}

// Hand the outbox back to the polling relay: with the WAL relays stopped,
// mark published what the slot confirmed and drop the slot.
func ExampleTakeover() {
	res, err := walrelay.Takeover(context.Background(), os.Getenv("DATABASE_URL"),
		walrelay.TakeoverConfig{Table: txoutbox.Table{Schema: "app"}})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%d rows confirmed, %d left to the polling relay", res.Confirmed, res.Unconfirmed)
}
