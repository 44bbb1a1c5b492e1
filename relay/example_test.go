package relay_test

import (
	"context"
	"database/sql"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/txoutbox/relay"
)

// ReadStats is the health check: alert on lag, not on relay liveness.
func ExampleReadStats() {
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	s, err := relay.ReadStats(context.Background(), db, relay.Config{}.Table)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("backlog=%d lag=%s dead=%d", s.Backlog, s.Lag, s.Dead)
}
