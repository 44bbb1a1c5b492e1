// Command gorm is a small order service on GORM whose models record domain
// events that the gormoutbox plugin writes in each save's own transaction.
// It places, pays and cancels orders, then runs the relay and prints what a
// consumer reads, keyed by order id. It publishes to KAFKA_BROKERS, or to an
// embedded Kafka-protocol broker (kfake) when that is empty.
//
//	go run ./examples/gorm
//	DATABASE_URL=mysql://USER:PASSWORD@HOST:PORT/DATABASE go run ./examples/gorm
//
// It uses DATABASE_URL, or the local PostgreSQL with trust auth, and works
// in its own schema "txoutbox_gorm_example", recreated on every run; with
// a mysql:// (or mariadb://) DATABASE_URL, on MySQL or MariaDB through
// GORM's MySQL driver, in a database of that name on that server.
package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/examples/internal/demo"
	"github.com/txoutbox/txoutbox/gormoutbox"
)

const schema = "txoutbox_gorm_example"

func main() {
	demo.Main(context.Background(), run)
}

func run(ctx context.Context, databaseURL string) error {
	started := time.Now()
	o, err := demo.Schema(ctx, databaseURL, schema)
	if err != nil {
		return err
	}
	defer o.DB.Close()

	// The three lines of setup (the plugin takes the dialect from GORM's).
	dialector := postgres.New(postgres.Config{Conn: o.DB})
	if o.Dialect == txoutbox.MySQL {
		dialector = mysql.New(mysql.Config{Conn: o.DB})
	}
	db, err := gorm.Open(dialector, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	plugin, err := gormoutbox.New(gormoutbox.Config{Writer: txoutbox.WriterConfig{Table: o.Table}, DefaultTopic: "orders"})
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

	// The relay publishes the events; an independent consumer reads them.
	return demo.RelayAndPrint(ctx, o, "orders", "order", started)
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
