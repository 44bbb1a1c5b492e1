// Command gorm is a small order service on GORM whose models record domain
// events that the gormoutbox plugin writes in each save's own transaction.
// It places, pays and cancels orders, then runs the relay against an
// in-process Kafka-protocol broker (kfake) and prints what a consumer reads,
// keyed by order id.
//
//	go run ./examples/gorm
//
// It uses DATABASE_URL, or the local PostgreSQL with trust auth, and works
// in its own schema "txoutbox_gorm_example", recreated on every run.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/url"
	"os"
	"sort"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/gormoutbox"
	"github.com/txoutbox/txoutbox/migrations"
	"github.com/txoutbox/txoutbox/relay"
)

const schema = "txoutbox_gorm_example"

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	dbURL := os.Getenv("DATABASE_URL")
	if dbURL == "" {
		dbURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	sqlDB, err := setupSchema(ctx, dbURL)
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	table := txoutbox.Table{Schema: schema}

	// The three lines of setup.
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	plugin, err := gormoutbox.New(gormoutbox.Config{Table: table, DefaultTopic: "orders"})
	if err != nil {
		return err
	}
	if err := db.Use(plugin); err != nil {
		return err
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		return err
	}

	svc := &Service{db: db}
	a, err := svc.Place(ctx, 1250)
	if err != nil {
		return err
	}
	b, err := svc.Place(ctx, 990)
	if err != nil {
		return err
	}
	if err := svc.Pay(ctx, a.ID); err != nil {
		return err
	}
	if err := svc.Cancel(ctx, b.ID); err != nil {
		return err
	}
	// A domain rule refuses this: nothing is saved, no event is written.
	err = svc.Pay(ctx, b.ID)
	if !errors.Is(err, ErrNotPayable) {
		return fmt.Errorf("paying a cancelled order: got %v, want ErrNotPayable", err)
	}
	fmt.Printf("order %d: pay refused (%v); nothing written\n", b.ID, err)

	var pending int
	if err := sqlDB.QueryRowContext(ctx, `SELECT count(*) FROM `+schema+`.outbox WHERE state = 'pending'`).Scan(&pending); err != nil {
		return err
	}
	fmt.Printf("outbox: %d pending events\n", pending)
	return relayAndConsume(ctx, sqlDB, table, pending)
}

// setupSchema recreates the example's schema, migrates the outbox into it,
// and returns a pool whose connections use it as their search_path.
func setupSchema(ctx context.Context, dbURL string) (*sql.DB, error) {
	admin, err := sql.Open("pgx", dbURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); err != nil {
		return nil, fmt.Errorf("reset schema: %w", err)
	}
	m, err := migrations.New(admin, migrations.Config{Table: txoutbox.Table{Schema: schema}})
	if err != nil {
		return nil, err
	}
	if _, err := m.Up(ctx); err != nil {
		return nil, err
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return sql.Open("pgx", u.String())
}

// relayAndConsume publishes the outbox with the relay to an in-process
// broker and prints what a consumer reads, grouped by key (the order id).
func relayAndConsume(ctx context.Context, sqlDB *sql.DB, table txoutbox.Table, want int) error {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		return fmt.Errorf("start broker: %w", err)
	}
	defer cluster.Close()
	pub, err := relay.NewKafkaPublisher(cluster.ListenAddrs(), relay.KafkaConfig{})
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := relay.New(sqlDB, pub, relay.Config{Table: table, Logger: quiet})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() {
		stop()
		<-done
		pub.Close()
	}()

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer consumer.Close()
	byKey := map[string][]string{}
	read := 0
	deadline, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for read < want {
		fetches := consumer.PollFetches(deadline)
		if deadline.Err() != nil {
			return fmt.Errorf("read %d of %d events before the deadline", read, want)
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return fmt.Errorf("consume: %v", errs[0].Err)
		}
		fetches.EachRecord(func(rec *kgo.Record) {
			typ := ""
			for _, h := range rec.Headers {
				if h.Key == relay.MetadataEventType {
					typ = string(h.Value)
				}
			}
			byKey[string(rec.Key)] = append(byKey[string(rec.Key)], fmt.Sprintf("%s %s", typ, rec.Value))
			read++
		})
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Println("a consumer of topic \"orders\" read, by key (order id):")
	for _, k := range keys {
		for _, e := range byKey[k] {
			fmt.Printf("  order %s: %s\n", k, e)
		}
	}
	return nil
}

// ErrNotPayable is returned by Pay for an order that is not awaiting payment.
var ErrNotPayable = errors.New("order is not awaiting payment")

// Order is the aggregate. Its methods change it and record what happened;
// the plugin writes the records with the next save.
type Order struct {
	ID     uint
	Total  int64 // cents
	Status string

	gormoutbox.Events `gorm:"-"`
}

func (o *Order) place() {
	o.Status = "placed"
	o.Record("order.placed", map[string]any{"total": o.Total})
}

func (o *Order) pay() error {
	if o.Status != "placed" {
		return fmt.Errorf("%w: order %d is %s", ErrNotPayable, o.ID, o.Status)
	}
	o.Status = "paid"
	o.Record("order.paid", map[string]any{"amount": o.Total})
	return nil
}

func (o *Order) cancel() {
	o.Status = "cancelled"
	o.Record("order.cancelled", map[string]any{"reason": "customer request"})
}

// Service is the application layer: one transaction per command.
type Service struct{ db *gorm.DB }

// Place creates an order; its order.placed event carries the new id.
func (s *Service) Place(ctx context.Context, total int64) (*Order, error) {
	o := &Order{Total: total}
	o.place()
	if err := s.db.WithContext(ctx).Create(o).Error; err != nil {
		return nil, fmt.Errorf("place order: %w", err)
	}
	fmt.Printf("order %d: placed\n", o.ID)
	return o, nil
}

// Pay marks an order paid.
func (s *Service) Pay(ctx context.Context, id uint) error {
	return s.update(ctx, id, "paid", (*Order).pay)
}

// Cancel cancels an order.
func (s *Service) Cancel(ctx context.Context, id uint) error {
	return s.update(ctx, id, "cancelled", func(o *Order) error { o.cancel(); return nil })
}

// update loads the order under a row lock, applies the domain method and
// saves it, all in one transaction; the lock keeps the order's events in
// commit order.
func (s *Service) update(ctx context.Context, id uint, what string, change func(*Order) error) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var o Order
		if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).First(&o, id).Error; err != nil {
			return fmt.Errorf("load order %d: %w", id, err)
		}
		if err := change(&o); err != nil {
			return err
		}
		if err := tx.Save(&o).Error; err != nil {
			return fmt.Errorf("save order %d: %w", id, err)
		}
		fmt.Printf("order %d: %s\n", id, what)
		return nil
	})
}
