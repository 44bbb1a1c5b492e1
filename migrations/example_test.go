package migrations_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/migrations"
)

// Apply the outbox schema at start-up; concurrent deploys apply each version
// once.
func Example() {
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/app") // with _ "github.com/jackc/pgx/v5/stdlib" imported
	if err != nil {
		log.Fatal(err)
	}
	m, err := migrations.New(db, migrations.Config{Table: txoutbox.Table{Schema: "app"}})
	if err != nil {
		log.Fatal(err) // e.g. a table name that is not a plain identifier
	}
	applied, err := m.Up(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("applied %v", applied)
}
