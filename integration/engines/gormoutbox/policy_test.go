package gormoutbox_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/gormoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// sqlCounter is a GORM logger that counts the statements GORM runs.
type sqlCounter struct {
	logger.Interface
	n atomic.Int64
}

func (c *sqlCounter) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	c.n.Add(1)
}

func TestNoTransactionRefusedBeforeSQL(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		counter := &sqlCounter{Interface: logger.Discard}
		for _, tc := range []struct {
			name string
			gcfg *gorm.Config
			sess *gorm.Session
		}{
			{"global", &gorm.Config{SkipDefaultTransaction: true, Logger: counter}, nil},
			{"session", &gorm.Config{Logger: counter}, &gorm.Session{SkipDefaultTransaction: true}},
			{"prepared", &gorm.Config{SkipDefaultTransaction: true, PrepareStmt: true, Logger: counter}, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				b := setup(t, eng, gormoutbox.Config{}, tc.gcfg)
				db := b.db
				if tc.sess != nil {
					db = db.Session(tc.sess)
				}
				before := counter.n.Load()
				o := Order{Total: 1}
				o.Place()
				mustErrIs(t, db.Create(&o).Error, gormoutbox.ErrNoTransaction)
				inv := Invoice{Amount: 1} // records only in its hook
				mustErrIs(t, db.Create(&inv).Error, gormoutbox.ErrNoTransaction)
				if inv.beforeCalls != 0 {
					t.Fatal("BeforeCreate ran although the statement was refused")
				}
				mustErrIs(t, db.Create(&Product{Name: "p"}).Error, gormoutbox.ErrNoTransaction)
				if n := counter.n.Load() - before; n != 0 {
					t.Fatalf("%d SQL statements ran before the refusal", n)
				}
				if n := b.count("orders") + b.count("invoices") + b.count("products") + b.count("outbox"); n != 0 {
					t.Fatalf("%d rows written by refused statements", n)
				}
				// Models with nothing to write are untouched.
				if err := db.Create(&Note{Text: "plain"}).Error; err != nil {
					t.Fatal(err)
				}
				quiet := Order{Total: 2} // embeds Events, records nothing, has no hooks
				if err := db.Create(&quiet).Error; err != nil {
					t.Fatal(err)
				}
				if err := db.Model(&quiet).Update("total", 3).Error; err != nil {
					t.Fatal(err)
				}
				// Inside db.Transaction the same session is fine.
				err := db.Transaction(func(tx *gorm.DB) error {
					o := Order{Total: 4}
					o.Place()
					return tx.Create(&o).Error
				})
				if err != nil {
					t.Fatal(err)
				}
				equal(t, "events", b.eventNames(), []string{"order/2/order.placed"})
				b.sameTx("orders", 2, "order")
			})
		}
	})
}

func TestTxBeginWrapsTheStatement(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		for _, prepared := range []bool{false, true} {
			b := setup(t, eng, gormoutbox.Config{TxPolicy: gormoutbox.TxBegin}, &gorm.Config{SkipDefaultTransaction: true, PrepareStmt: prepared})
			o := Order{Total: 1}
			o.Place()
			if err := b.db.Create(&o).Error; err != nil {
				t.Fatal(err)
			}
			b.sameTx("orders", o.ID, "order")
			o.Pay()
			if err := b.db.Save(&o).Error; err != nil {
				t.Fatal(err)
			}
			b.sameTx("orders", o.ID, "order")
			o.Cancel()
			if err := b.db.Delete(&o).Error; err != nil {
				t.Fatal(err)
			}
			inv := Invoice{Amount: 5}
			if err := b.db.Create(&inv).Error; err != nil {
				t.Fatal(err)
			}
			b.sameTx("invoices", inv.ID, "invoice")
			p := Product{Name: "p"}
			if err := b.db.Create(&p).Error; err != nil {
				t.Fatal(err)
			}
			b.sameTx("products", p.ID, "product")

			// A failed outbox write rolls the plugin's transaction back.
			bad := Order{Total: 2}
			bad.RecordEvent(badTopicEvent())
			mustErrIs(t, b.db.Create(&bad).Error, txoutbox.ErrInvalidEvent)
			if n := b.count("orders"); n != 0 {
				t.Fatalf("orders = %d, want 0 (one deleted, one rolled back)", n)
			}
			// The connection went back to the pool: statements after it run
			// outside any transaction again and see the committed rows.
			var n int64
			if err := b.db.Model(&Invoice{}).Count(&n).Error; err != nil || n != 1 {
				t.Fatalf("count after the plugin's transactions = %d, %v", n, err)
			}
			equal(t, "events", b.eventNames(), []string{"order/1/order.placed", "order/1/order.paid", "order/1/order.cancelled",
				"invoice/1/invoice.issued", "product/1/product.created"})
		}
	})
}

func TestPrepareStmt(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, &gorm.Config{PrepareStmt: true})
		for i := 0; i < 3; i++ { // the second and third use the prepared statements
			o := Order{Total: int64(i + 1)}
			o.Place()
			if err := b.db.Create(&o).Error; err != nil {
				t.Fatal(err)
			}
			b.sameTx("orders", o.ID, "order")
			o.Pay()
			if err := b.db.Model(&o).Updates(map[string]any{"status": o.Status}).Error; err != nil {
				t.Fatal(err)
			}
			b.sameTx("orders", o.ID, "order")
		}
		err := b.db.Transaction(func(tx *gorm.DB) error {
			o := Order{Total: 9}
			o.Place()
			if err := tx.Create(&o).Error; err != nil {
				return err
			}
			if err := gormoutbox.Emit(tx, mustEvent(t, "orders", "order", "4", "order.noted")); err != nil {
				return err
			}
			return tx.Transaction(func(tx2 *gorm.DB) error {
				o := Order{Total: 10}
				o.Place()
				if err := tx2.Create(&o).Error; err != nil {
					return err
				}
				return errAbort
			})
		})
		mustErrIs(t, err, errAbort)
		if n := b.count("outbox"); n != 6 {
			t.Fatalf("outbox rows = %d, want 6 (the aborted transaction's gone)", n)
		}
		// Outside a transaction the pool is a *gorm.PreparedStmtDB: refused.
		o := Order{Total: 1}
		o.Place()
		mustErrIs(t, b.db.Session(&gorm.Session{SkipDefaultTransaction: true}).Create(&o).Error, gormoutbox.ErrNoTransaction)
	})
}

func TestSessionVariants(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		type ctxKey struct{}
		for _, tc := range []struct {
			name string
			db   *gorm.DB
		}{
			{"WithContext", b.db.WithContext(context.WithValue(ctx, ctxKey{}, 1))},
			{"NewDB", b.db.Session(&gorm.Session{NewDB: true})},
			{"FullSaveAssociations", b.db.Session(&gorm.Session{FullSaveAssociations: true})},
			{"SkipHooks", b.db.Session(&gorm.Session{SkipHooks: true})},
			{"Debug", b.db.Session(&gorm.Session{Logger: logger.Discard})},
		} {
			o := Order{Total: 1, Items: []Item{{SKU: tc.name}}}
			o.Place()
			o.Items[0].Record("item.added", nil)
			if err := tc.db.Create(&o).Error; err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			b.sameTx("orders", o.ID, "order")
			b.sameTx("items", o.Items[0].ID, "item")
			o.Pay()
			if err := tc.db.Save(&o).Error; err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			b.sameTx("orders", o.ID, "order")
		}
		if n := b.count("outbox"); n != 5*3 {
			t.Fatalf("outbox rows = %d, want 15", n)
		}
		// SkipHooks skips the model's hooks, so an event recorded in AfterCreate
		// is never recorded; events recorded before the save are still written.
		inv := Invoice{Amount: 1}
		if err := b.db.Session(&gorm.Session{SkipHooks: true}).Create(&inv).Error; err != nil {
			t.Fatal(err)
		}
		if n := b.count("outbox"); n != 15 {
			t.Fatalf("outbox rows = %d after SkipHooks, want 15", n)
		}
		// A cancelled context fails the statement and writes nothing.
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		o := Order{Total: 1}
		o.Place()
		if err := b.db.WithContext(cancelled).Create(&o).Error; err == nil {
			t.Fatal("Create with a cancelled context succeeded")
		}
		if n := b.count("outbox"); n != 15 {
			t.Fatalf("outbox rows = %d after a cancelled create", n)
		}
	})
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  gormoutbox.Config
		want string
	}{
		{gormoutbox.Config{TxPolicy: 7}, "gormoutbox: Config.TxPolicy: unknown value 7 (want TxRequire or TxBegin)"},
		{gormoutbox.Config{DefaultTopic: "a b"}, `gormoutbox: Config.DefaultTopic: "a b" has characters outside [a-zA-Z0-9._-]`},
		{gormoutbox.Config{Writer: txoutbox.WriterConfig{MaxPayloadBytes: -1}}, "gormoutbox: txoutbox: WriterConfig.MaxPayloadBytes is negative (-1)"},
		{gormoutbox.Config{Writer: txoutbox.WriterConfig{Table: txoutbox.Table{Name: "x; drop table y"}}}, "gormoutbox: txoutbox: invalid table name"},
	} {
		p, err := gormoutbox.New(tc.cfg)
		if err == nil || p != nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, %v; want error %q", tc.cfg, p, err, tc.want)
		}
	}
	if _, err := gormoutbox.New(gormoutbox.Config{Writer: txoutbox.WriterConfig{Table: txoutbox.Table{Name: "x; drop table y"}}}); !isInvalidTable(err) {
		t.Errorf("bad table error %v does not match txoutbox.ErrInvalidTable", err)
	}
	if _, err := gormoutbox.New(gormoutbox.Config{}); err != nil {
		t.Errorf("the zero Config is invalid: %v", err)
	}
}

func TestRegisterConflictReported(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		db, err := gorm.Open(dialector(b.tkdb), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		closeDB(t, db)
		// Another plugin insists on running after GORM's commit but before
		// the outbox write, which the outbox write cannot allow.
		if err := db.Callback().Create().After("gorm:commit_or_rollback_transaction").Before("gormoutbox:write_create").
			Register("other:after_commit", func(*gorm.DB) {}); err != nil {
			t.Fatal(err)
		}
		p, err := gormoutbox.New(gormoutbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		err = db.Use(p)
		if err == nil || !strings.Contains(err.Error(), "conflicting callback") || !strings.HasPrefix(err.Error(), "gormoutbox: register callback gormoutbox:write_create: ") {
			t.Fatalf("db.Use = %v, want the conflict reported", err)
		}
		// Registering twice is GORM's ErrRegistered.
		if err := b.db.Use(p); err != gorm.ErrRegistered {
			t.Fatalf("second db.Use = %v, want gorm.ErrRegistered", err)
		}
	})
}
