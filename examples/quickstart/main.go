// Command quickstart writes a few events transactionally with the core
// writer and shows what the outbox holds: committed events are pending for
// the relay, a rolled-back transaction left nothing.
//
//	go run ./examples/quickstart
//
// It uses DATABASE_URL, or the local PostgreSQL with trust auth, and works in
// its own schema "txoutbox_quickstart".
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/migrations"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()

	// Start from a clean schema so every run shows the same thing.
	if _, err := db.ExecContext(ctx, `DROP SCHEMA IF EXISTS txoutbox_quickstart CASCADE`); err != nil {
		return err
	}
	table := txoutbox.Table{Schema: "txoutbox_quickstart"}
	m, err := migrations.New(db, migrations.Config{Table: table})
	if err != nil {
		return err
	}
	if _, err := m.Up(ctx); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS txoutbox_quickstart.orders (id bigserial PRIMARY KEY, total bigint NOT NULL)`); err != nil {
		return err
	}
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: table})
	if err != nil {
		return err
	}

	// Two orders commit with their events; a third rolls back with its event.
	for i, total := range []int64{1250, 990, 4200} {
		rollback := i == 2
		if err := placeOrder(ctx, db, w, total, rollback); err != nil && !errors.Is(err, errRolledBack) {
			return err
		}
	}

	rows, err := db.QueryContext(ctx, `SELECT id, event_id, aggregate_id, event_type, state, convert_from(payload, 'UTF8')
		FROM txoutbox_quickstart.outbox WHERE state = 'pending' ORDER BY id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Println("pending outbox rows (the relay publishes these):")
	for rows.Next() {
		var id int64
		var eventID, aggregate, typ, state, payload string
		if err := rows.Scan(&id, &eventID, &aggregate, &typ, &state, &payload); err != nil {
			return err
		}
		fmt.Printf("  #%d %s order=%s %s %s %s\n", id, eventID, aggregate, typ, state, payload)
	}
	return rows.Err()
}

var errRolledBack = errors.New("rolled back on purpose")

// placeOrder inserts an order and its event in one transaction.
func placeOrder(ctx context.Context, db *sql.DB, w *txoutbox.Writer, total int64, rollback bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op after Commit

	var id int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO txoutbox_quickstart.orders (total) VALUES ($1) RETURNING id`, total).Scan(&id); err != nil {
		return err
	}
	ev, err := txoutbox.NewEvent("orders", "order", fmt.Sprint(id), "order.placed", map[string]any{"id": id, "total": total})
	if err != nil {
		return err
	}
	if err := w.Write(ctx, tx, ev); err != nil {
		return err
	}
	if rollback {
		fmt.Printf("order %d: rolled back, so its event is gone too\n", id)
		return errRolledBack
	}
	fmt.Printf("order %d: committed with event %s\n", id, ev.ID)
	return tx.Commit()
}
