package relay_test

import (
	"context"
	"database/sql"
	"log"
	"os"
	"os/signal"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/txoutbox/relay"
)

// A relay publishing the outbox through a Watermill publisher until the
// process is interrupted; in production the publisher is
// kafkapub.NewPublisher's. Stats is the health check: alert on lag, not on
// relay liveness.
func ExampleNew() {
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	r, err := relay.New(db, pub, relay.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() {
		if s, err := r.Stats(ctx); err == nil {
			log.Printf("backlog=%d lag=%s dead=%d", s.Backlog, s.Lag, s.Dead)
		}
	}()
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// One relay for the outbox of every tenant's schema: each table matching
// the pattern gets a relay of its own, found again every DiscoverInterval,
// sharing the pool, the publisher and one LISTEN connection. Bound the
// pool: each table's relay may run up to eight statements at once.
func ExampleNewGroup() {
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	db.SetMaxOpenConns(40)
	db.SetMaxIdleConns(40)
	pub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	g, err := relay.NewGroup(db, pub, relay.GroupConfig{
		Relay:         relay.Config{ID: "relay-0"}, // every tenant's outbox is named "outbox"
		SchemaPattern: "tenant_*",
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := g.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
