// Command quickstart writes a few events transactionally with the core
// writer, runs the relay, and shows them arriving at a Kafka broker: the
// committed events arrive, keyed by order id; the rolled-back one never
// existed.
//
//	go run ./examples/quickstart
//	DATABASE_URL=mysql://USER:PASSWORD@HOST:PORT/DATABASE go run ./examples/quickstart
//
// It uses DATABASE_URL, or the local PostgreSQL with trust auth, or an
// embedded PostgreSQL started from the machine's installation, and works in
// its own schema "txoutbox_quickstart", recreated on every run. With a
// mysql:// (or mariadb://) DATABASE_URL it runs on MySQL or MariaDB, in a
// database "txoutbox_quickstart" of its own on that server (a schema is a
// database there), which the URL's user must be allowed to create. It
// publishes to KAFKA_BROKERS, or to an embedded Kafka-protocol broker
// (kfake) on a loopback port when that is empty.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/examples/internal/demo"
	"github.com/txoutbox/txoutbox/migrations"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

func main() {
	demo.Main(context.Background(), run)
}

func run(ctx context.Context, databaseURL string) error {
	started := time.Now()
	// An empty schema of the example's own: every run shows the same thing.
	o, err := demo.Fresh(ctx, databaseURL, "txoutbox_quickstart")
	if err != nil {
		return err
	}
	db := o.DB
	defer db.Close()

	// The outbox table and its companions; the migrator detects the
	// database from db.
	m, err := migrations.New(db, migrations.Config{Table: o.Table})
	if err != nil {
		return err
	}
	if _, err := m.Up(ctx); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, createOrders[o.Dialect]); err != nil {
		return err
	}
	// The Writer is built without a connection: it is told the dialect.
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: o.Table, Dialect: o.Dialect})
	if err != nil {
		return err
	}

	// Two orders commit with their events; a third rolls back with its event.
	for i, total := range []int64{1250, 990, 4200} {
		rollback := i == 2
		if err := placeOrder(ctx, db, o.Dialect, w, total, rollback); err != nil && !errors.Is(err, errRolledBack) {
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
	// The relay detects the database from db (on MySQL it polls).
	r, err := relay.New(db, pub, relay.Config{Table: o.Table, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
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

// createOrders is the example's own table, in each database's SQL.
var createOrders = map[txoutbox.Dialect]string{
	txoutbox.PostgreSQL: `CREATE TABLE orders (id bigserial PRIMARY KEY, total bigint NOT NULL)`,
	txoutbox.MySQL:      `CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, total BIGINT NOT NULL)`,
}

// placeOrder inserts an order and its event in one transaction.
func placeOrder(ctx context.Context, db *sql.DB, dialect txoutbox.Dialect, w *txoutbox.Writer, total int64, rollback bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op after Commit

	id, err := insertOrder(ctx, tx, dialect, total)
	if err != nil {
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

// insertOrder inserts an order row and returns its id: PostgreSQL returns
// it, MySQL reports it (it has no RETURNING).
func insertOrder(ctx context.Context, tx *sql.Tx, dialect txoutbox.Dialect, total int64) (int64, error) {
	if dialect == txoutbox.MySQL {
		res, err := tx.ExecContext(ctx, `INSERT INTO orders (total) VALUES (?)`, total)
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	}
	var id int64
	err := tx.QueryRowContext(ctx, `INSERT INTO orders (total) VALUES ($1) RETURNING id`, total).Scan(&id)
	return id, err
}
