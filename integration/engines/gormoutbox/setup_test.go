package gormoutbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/gormoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// Order records domain events; Items record their own.
type Order struct {
	ID     uint `gorm:"primaryKey"`
	Total  int64
	Status string
	Items  []Item

	gormoutbox.Events `gorm:"-"`
}

func (o *Order) Place() {
	o.Status = "placed"
	o.Record("order.placed", map[string]any{"total": o.Total})
}

func (o *Order) Pay() {
	o.Status = "paid"
	o.Record("order.paid", map[string]any{"total": o.Total})
}

func (o *Order) Cancel() {
	o.Status = "cancelled"
	o.Record("order.cancelled", nil)
}

type Item struct {
	ID      uint `gorm:"primaryKey"`
	OrderID uint
	SKU     string

	gormoutbox.Events `gorm:"-"`
}

// Invoice records its event in AfterCreate, when its key exists, and counts
// BeforeCreate calls so tests can tell whether the chain ran.
type Invoice struct {
	ID     uint `gorm:"primaryKey"`
	Amount int64

	gormoutbox.Events `gorm:"-"`
	beforeCalls       int
}

func (i *Invoice) BeforeCreate(*gorm.DB) error { i.beforeCalls++; return nil }

func (i *Invoice) AfterCreate(*gorm.DB) error {
	i.Record("invoice.issued", map[string]any{"id": i.ID, "amount": i.Amount})
	return nil
}

// Product opts in to change events on its own topic.
type Product struct {
	ID    uint `gorm:"primaryKey"`
	Name  string
	Price int64
}

func (*Product) OutboxChangeEvents() {}
func (*Product) OutboxTopic() string { return "catalog" }

// Note is a plain model the plugin must leave alone.
type Note struct {
	ID   uint `gorm:"primaryKey"`
	Text string
}

type bundle struct {
	t    *testing.T
	db   *gorm.DB
	raw  *sql.DB
	tkdb *testkit.DB
}

// setup opens GORM on a fresh migrated schema, registers the plugin with
// cfg (its Table defaults to the test schema's outbox) and creates the
// models' tables.
func setup(t *testing.T, e testkit.Engine, cfg gormoutbox.Config, gcfg *gorm.Config) *bundle {
	t.Helper()
	tk := testkit.NewOutboxOn(t, e)
	if cfg.Writer.Table.Name == "" && cfg.Writer.Table.Schema == "" {
		cfg.Writer.Table = tk.Table()
	}
	if cfg.DefaultTopic == "" {
		cfg.DefaultTopic = "orders"
	}
	if gcfg == nil {
		gcfg = &gorm.Config{}
	}
	if gcfg.Logger == nil {
		gcfg.Logger = logger.Discard
	}
	db, err := gorm.Open(dialector(tk), gcfg)
	if err != nil {
		t.Fatal(err)
	}
	closeDB(t, db)
	if err := db.Session(&gorm.Session{SkipDefaultTransaction: true}).AutoMigrate(&Order{}, &Item{}, &Invoice{}, &Product{}, &Note{}); err != nil {
		t.Fatal(err)
	}
	p, err := gormoutbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	return &bundle{t: t, db: db, raw: tk.SQL, tkdb: tk}
}

// dialector is GORM's driver for the test database: PostgreSQL's or
// MySQL's.
func dialector(tk *testkit.DB) gorm.Dialector {
	if tk.Dialect() == txoutbox.MySQL {
		return mysql.Open(tk.DSN())
	}
	return postgres.Open(tk.DSN())
}

// writerIDs reports whether rows name the transaction that wrote them
// (PostgreSQL's xmin), for the checks that a model row and its event
// committed together. InnoDB keeps no such id; on MySQL the tests that
// roll back show the two commit or vanish together.
func (b *bundle) writerIDs() bool { return b.tkdb.Dialect() == txoutbox.PostgreSQL }

// closeDB closes the GORM handle's pool when the test ends.
func closeDB(t testing.TB, db *gorm.DB) {
	t.Cleanup(func() {
		if s, err := db.DB(); err == nil {
			s.Close()
		}
	})
}

// event is an outbox row as the tests compare it.
type event struct {
	Topic, AggregateType, AggregateID, Type string
	Payload                                 map[string]any
}

func (e event) String() string {
	return fmt.Sprintf("%s/%s/%s/%s", e.Topic, e.AggregateType, e.AggregateID, e.Type)
}

// events returns the outbox rows in insertion order.
func (b *bundle) events() []event {
	b.t.Helper()
	rows, err := b.raw.Query(`SELECT topic, aggregate_type, aggregate_id, event_type, payload FROM outbox ORDER BY id`)
	if err != nil {
		b.t.Fatal(err)
	}
	defer rows.Close()
	var out []event
	for rows.Next() {
		var e event
		var payload []byte
		if err := rows.Scan(&e.Topic, &e.AggregateType, &e.AggregateID, &e.Type, &payload); err != nil {
			b.t.Fatal(err)
		}
		if err := json.Unmarshal(payload, &e.Payload); err != nil {
			b.t.Fatalf("payload %q: %v", payload, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		b.t.Fatal(err)
	}
	return out
}

// eventNames renders events as "aggregate_type/id/type" for comparison.
func (b *bundle) eventNames() []string {
	b.t.Helper()
	var out []string
	for _, e := range b.events() {
		out = append(out, e.AggregateType+"/"+e.AggregateID+"/"+e.Type)
	}
	return out
}

func (b *bundle) count(table string) int {
	b.t.Helper()
	var n int
	if err := b.raw.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

// sameTx checks that the model row and the aggregate's latest outbox row
// were written by one transaction (PostgreSQL's xmin; nothing on MySQL,
// see writerIDs).
func (b *bundle) sameTx(table string, id uint, aggregateType string) {
	b.t.Helper()
	if !b.writerIDs() {
		return
	}
	var modelXmin, eventXmin string
	if err := b.raw.QueryRow(`SELECT xmin::text FROM `+table+` WHERE id = $1`, id).Scan(&modelXmin); err != nil {
		b.t.Fatalf("read %s %d: %v", table, id, err)
	}
	if err := b.raw.QueryRow(`SELECT xmin::text FROM outbox WHERE aggregate_type = $1 AND aggregate_id = $2 ORDER BY id DESC LIMIT 1`,
		aggregateType, fmt.Sprint(id)).Scan(&eventXmin); err != nil {
		b.t.Fatalf("read the latest outbox row of %s %d: %v", aggregateType, id, err)
	}
	if eventXmin != modelXmin {
		b.t.Fatalf("%s %d written by transaction %s, its latest outbox row by %s", table, id, modelXmin, eventXmin)
	}
}

func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s:\n got %q\nwant %q", what, got, want)
	}
}

func mustErrIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want one matching %v", err, target)
	}
}

var ctx = context.Background()
