// Command quickstart writes a few events transactionally with the core
// writer, runs the relay, and shows them arriving at a Kafka broker: the
// committed events arrive, keyed by order id; the rolled-back one never
// existed.
//
//	go run ./examples/quickstart
//
// It uses DATABASE_URL, or the local PostgreSQL with trust auth, or an
// embedded PostgreSQL started from the machine's installation, and works in
// its own schema "txoutbox_quickstart". It publishes to KAFKA_BROKERS, or to
// an embedded Kafka-protocol broker (kfake) on a loopback port when that is
// empty.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/examples/internal/demo"
	"github.com/txoutbox/txoutbox/migrations"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

func main() {
	demo.Main(context.Background(), run)
}

func run(ctx context.Context) error {
	started := time.Now()
	db, err := sql.Open("pgx", demo.DatabaseURL())
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

	// The relay publishes what committed.
	brokers, stopBroker, err := demo.Brokers()
	if err != nil {
		return err
	}
	defer stopBroker()
	pub, err := kafkapub.NewPublisher(brokers, kafkapub.Config{})
	if err != nil {
		return err
	}
	defer pub.Close()
	r, err := relay.New(db, pub, relay.Config{Table: table, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(relayCtx) }()
	defer stopRelay()

	// An independent consumer reads them back.
	records, err := demo.Consume(ctx, brokers, "orders", started, 2)
	if err != nil {
		return err
	}
	for _, rec := range records {
		fmt.Printf("broker: topic=orders key=%s value=%s event_type=%s event_id=%s\n", rec.Key, rec.Value, rec.EventType, rec.EventID)
	}
	// A clean shutdown records every acknowledgement before it returns.
	stopRelay()
	if err := <-relayDone; err != nil {
		return err
	}
	s, err := r.Stats(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("outbox: backlog=%d lag=%s dead=%d\n", s.Backlog, s.Lag, s.Dead)
	return nil
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
