package main

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/entoutbox"
	"github.com/txoutbox/txoutbox/gormoutbox"
	"github.com/txoutbox/txoutbox/internal/entest"
	_ "github.com/txoutbox/txoutbox/internal/entest/runtime" // installs the mixin's hook
	"github.com/txoutbox/txoutbox/internal/ident"
)

// overhead is a write-path cost ratio: the same work with and without the
// outbox, alternated in one loop so load elsewhere on the machine hits both
// arms alike.
type overhead struct {
	Scenario string         `json:"scenario"`
	Arm      string         `json:"arm"`
	Ops      int            `json:"ops"`
	OffUS    float64        `json:"off_us"`
	OnUS     float64        `json:"on_us"`
	Ratio    float64        `json:"ratio"`
	Settings map[string]any `json:"settings"`
}

// alternate runs off and on n times each, interleaved after a warm-up, and
// returns their mean times and the ratio on/off.
func alternate(n int, off, on func() error) (offUS, onUS, ratio float64, err error) {
	for range min(n/10, 100) {
		if err := off(); err != nil {
			return 0, 0, 0, err
		}
		if err := on(); err != nil {
			return 0, 0, 0, err
		}
	}
	var tOff, tOn time.Duration
	for range n {
		t0 := time.Now()
		if err := off(); err != nil {
			return 0, 0, 0, err
		}
		t1 := time.Now()
		if err := on(); err != nil {
			return 0, 0, 0, err
		}
		tOff += t1.Sub(t0)
		tOn += time.Since(t1)
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	return us(tOff), us(tOn), float64(tOn) / float64(tOff), nil
}

// runGormOverhead measures Create of one order recording one event with the
// plugin, against the same Create without it (the event is recorded and
// never written), each in GORM's default transaction — what
// gormoutbox's BenchmarkCreateOverhead measures.
func runGormOverhead(ctx context.Context, e *env) (overhead, error) {
	s, err := e.newSchema(ctx, "gorm")
	if err != nil {
		return overhead{}, err
	}
	defer s.close()
	open := func() (*gorm.DB, *sql.DB, error) {
		db, err := gorm.Open(postgres.Open(s.URL), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return nil, nil, err
		}
		sqlDB, err := db.DB()
		return db, sqlDB, err
	}
	off, offSQL, err := open()
	if err != nil {
		return overhead{}, err
	}
	defer offSQL.Close()
	on, onSQL, err := open()
	if err != nil {
		return overhead{}, err
	}
	defer onSQL.Close()
	if err := off.AutoMigrate(&BenchOrder{}); err != nil {
		return overhead{}, err
	}
	p, err := gormoutbox.New(gormoutbox.Config{Writer: txoutbox.WriterConfig{Table: s.Table}, DefaultTopic: "orders"})
	if err != nil {
		return overhead{}, err
	}
	if err := on.Use(p); err != nil {
		return overhead{}, err
	}
	create := func(db *gorm.DB) func() error {
		return func() error {
			o := BenchOrder{Total: 1250, Status: "placed"}
			o.Record("order.placed", map[string]any{"total": o.Total})
			return db.WithContext(ctx).Create(&o).Error
		}
	}
	n := e.opts.writeOps
	offUS, onUS, ratio, err := alternate(n, create(off), create(on))
	if err != nil {
		return overhead{}, fmt.Errorf("gorm overhead: %w", err)
	}
	return overhead{Scenario: "write", Arm: "gorm", Ops: n, OffUS: offUS, OnUS: onUS, Ratio: ratio,
		Settings: map[string]any{"op": "Create of one row recording one event, GORM's default transaction", "notify": true}}, nil
}

// runEntOverhead measures Create of one Order (the mixin writes its change
// event) against Create of one Plain (the same fields, no mixin), each in
// its own transaction through entoutbox.WithTx.
func runEntOverhead(ctx context.Context, e *env) (overhead, error) {
	s, err := e.newSchema(ctx, "ent")
	if err != nil {
		return overhead{}, err
	}
	defer s.close()
	client := entest.NewClient(entest.Driver(entsql.OpenDB(dialect.Postgres, s.SQL)))
	if err := client.Schema.Create(ctx); err != nil {
		return overhead{}, fmt.Errorf("ent schema: %w", err)
	}
	plain := func() error {
		return entoutbox.WithTx(ctx, client, func(tx *entest.Tx) error {
			return tx.Plain.Create().SetTotal(1250).SetNote("gift").Exec(ctx)
		})
	}
	order := func() error {
		return entoutbox.WithTx(ctx, client, func(tx *entest.Tx) error {
			return tx.Order.Create().SetTotal(1250).SetNote("gift").Exec(ctx)
		})
	}
	n := e.opts.writeOps
	offUS, onUS, ratio, err := alternate(n, plain, order)
	if err != nil {
		return overhead{}, fmt.Errorf("ent overhead: %w", err)
	}
	return overhead{Scenario: "write", Arm: "ent", Ops: n, OffUS: offUS, OnUS: onUS, Ratio: ratio,
		Settings: map[string]any{"op": "Create of one row in entoutbox.WithTx; the mixin writes one change event", "notify": true}}, nil
}

// notifyWriters is the write concurrency for the NOTIFY cost.
const notifyWriters = 16

// runNotifyCost measures what NOTIFY costs the write path: 16 writers each
// commit transactions of one business row and one event, in alternating
// phases with the Writer's NOTIFY on and off; the ratio is the mean
// transaction time on over off.
func runNotifyCost(ctx context.Context, e *env) (overhead, error) {
	s, err := e.newSchema(ctx, "notify")
	if err != nil {
		return overhead{}, err
	}
	defer s.close()
	if _, err := s.SQL.ExecContext(ctx, "CREATE TABLE bench_orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, total bigint NOT NULL)"); err != nil {
		return overhead{}, err
	}
	s.SQL.SetMaxOpenConns(notifyWriters + 2)
	s.SQL.SetMaxIdleConns(notifyWriters + 2)
	// A listener, as a running relay has: NOTIFY with nobody listening
	// skips most of its work.
	listen, err := s.SQL.Conn(ctx)
	if err != nil {
		return overhead{}, err
	}
	defer listen.Close()
	if _, err := listen.ExecContext(ctx, "LISTEN "+ident.Quote(s.Table.Channel())); err != nil {
		return overhead{}, fmt.Errorf("listen: %w", err)
	}
	listenCtx, stopListening := context.WithCancel(ctx)
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		_ = listen.Raw(func(dc any) error {
			c := dc.(*stdlib.Conn).Conn()
			for {
				if _, err := c.WaitForNotification(listenCtx); err != nil {
					return err
				}
			}
		})
	}()
	defer func() { stopListening(); <-listening }()
	writers := map[bool]*txoutbox.Writer{}
	for _, notify := range []bool{false, true} {
		w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: s.Table, DisableNotify: !notify})
		if err != nil {
			return overhead{}, err
		}
		writers[notify] = w
	}
	insertOrder := "INSERT INTO bench_orders (total) VALUES ($1)"
	phase := func(w *txoutbox.Writer, d time.Duration) (txs int64, busy time.Duration, err error) {
		var (
			wg    sync.WaitGroup
			count atomic.Int64
			total atomic.Int64
			fail  atomic.Value
		)
		stopAt := time.Now().Add(d)
		for i := range notifyWriters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stopAt) {
					t0 := time.Now()
					if err := writeOne(ctx, s.SQL, w, insertOrder, i); err != nil {
						fail.Store(err)
						return
					}
					total.Add(int64(time.Since(t0)))
					count.Add(1)
				}
			}()
		}
		wg.Wait()
		if err, ok := fail.Load().(error); ok {
			return 0, 0, err
		}
		return count.Load(), time.Duration(total.Load()), nil
	}
	var (
		txs  = map[bool]int64{}
		busy = map[bool]time.Duration{}
	)
	if _, _, err := phase(writers[true], time.Second); err != nil { // warm-up
		return overhead{}, fmt.Errorf("notify cost: %w", err)
	}
	for round := range e.opts.notifyRounds {
		for _, notify := range []bool{round%2 == 0, round%2 != 0} {
			n, b, err := phase(writers[notify], e.opts.notifyPhase)
			if err != nil {
				return overhead{}, fmt.Errorf("notify cost: %w", err)
			}
			txs[notify] += n
			busy[notify] += b
		}
	}
	us := func(notify bool) float64 { return float64(busy[notify].Microseconds()) / float64(txs[notify]) }
	return overhead{Scenario: "write", Arm: "notify", Ops: int(txs[false] + txs[true]), OffUS: us(false), OnUS: us(true), Ratio: us(true) / us(false),
		Settings: map[string]any{"writers": notifyWriters, "op": "transaction: insert one business row + Writer.Write of one event", "phases": 2 * e.opts.notifyRounds, "phase": e.opts.notifyPhase.String(), "listener": true}}, nil
}

func writeOne(ctx context.Context, db *sql.DB, w *txoutbox.Writer, insertOrder string, i int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, insertOrder, 1250); err != nil {
		return err
	}
	if err := w.Write(ctx, tx, benchEvent("orders", i, 1000)); err != nil {
		return err
	}
	return tx.Commit()
}
