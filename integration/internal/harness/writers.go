package harness

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	gormmysql "gorm.io/driver/mysql"
	gormpg "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/entoutbox"
	"github.com/txoutbox/txoutbox/examples/ent/ent"
	"github.com/txoutbox/txoutbox/examples/ent/ent/order"
	_ "github.com/txoutbox/txoutbox/examples/ent/ent/runtime" // installs the outbox mixin's hook
	"github.com/txoutbox/txoutbox/gormoutbox"
)

// Topics the writers publish to: the ent example's Order schema writes to
// "orders"; GORM orders get their own topic because their ids count from 1
// too, and two aggregates sharing a key would be ordered by nobody.
const (
	TopicEnt  = "orders"
	TopicGorm = "gorm-orders"
)

// gormOrder is the GORM writers' aggregate: its domain events are recorded
// with ids assigned here, so the harness knows exactly which event ids
// committed and which rolled back.
type gormOrder struct {
	ID                uint `gorm:"primaryKey"`
	Status            string
	Total             int64
	gormoutbox.Events `gorm:"-"`
}

func (gormOrder) TableName() string   { return "chaos_gorm_orders" }
func (gormOrder) OutboxTopic() string { return TopicGorm }

// WriteConfig shapes the write load.
type WriteConfig struct {
	// Writers is the number of writer goroutines; even ones use GORM, odd
	// ones ent. Each owns its orders, so one aggregate is never written by
	// two transactions at once (the relay's documented requirement, which
	// ORM saves meet by locking the row anyway).
	Writers int
	// Events is how many committed events to write in total.
	Events int
	// Over spreads the events over about this long, so faults land under
	// load rather than after the writers finished. Zero: as fast as
	// possible.
	Over time.Duration
	// RollbackPercent of transactions write everything, then roll back.
	RollbackPercent int
	// HoldMax keeps each transaction open a random time up to HoldMax after
	// its inserts, so that higher outbox ids commit before lower ones.
	HoldMax time.Duration
	// LongHold adds one GORM writer that holds each of its transactions
	// open between LongHold/2 and LongHold while the others commit: the
	// trap for a relay that tracks a high-water mark of ids.
	LongHold time.Duration
	// UnknownOutcomes makes the writers survive a database crash: a
	// transaction that fails for any reason other than a planned rollback
	// may have committed (the server can crash after the commit and before
	// its reply), so its events are booked as unknown, accepted in the
	// outbox or not, and the writer carries on after a short pause.
	// Without it every failure is an error, as no other fault touches the
	// writers' connections.
	UnknownOutcomes bool
	// AsyncCommit makes the writers commit with synchronous_commit = off,
	// as services do for speed: a commit is acknowledged before its WAL is
	// flushed, and a database crash may lose it. Every committed event is
	// then of unknown outcome for the books (in the outbox or not); what
	// must hold is that none the database lost reached the broker
	// (phantom=0). It needs UnknownOutcomes.
	AsyncCommit bool
	// DelayPercent of the GORM writers' events get a NotBefore between
	// DelayMax/4 and DelayMax ahead: each holds its aggregate's later
	// events back until it is published (the relay's order rule).
	DelayPercent int
	DelayMax     time.Duration
	// LargePercent of the GORM writers' events carry LargeBytes more of
	// payload (random hex digits): over the claim check's threshold.
	LargePercent int
	LargeBytes   int
}

// Writers runs the write load and counts what committed and rolled back.
type Writers struct {
	env  *Env
	cfg  WriteConfig
	gorm *gorm.DB
	ent  *ent.Client
	sql  *sql.DB // the ent client's pool

	committed  atomic.Int64
	rolledBack atomic.Int64
	txs        atomic.Int64
	overtaken  atomic.Int64

	mu          sync.Mutex
	perTopic    map[string]int
	gormCommit  map[uuid.UUID]bool // GORM events by id: true committed, false rolled back
	extraEvents int

	// Events of transactions whose commit outcome is unknown (see
	// WriteConfig.UnknownOutcomes): per topic, and the GORM ones by id.
	unknownPerTopic map[string]int
	gormUnknown     map[uuid.UUID]bool
	unknownTxs      atomic.Int64
}

// errUnknown marks a transaction that failed in a way that may have
// committed it.
var errUnknown = errors.New("commit outcome unknown")

// UnknownTxs is how many transactions ended with an unknown outcome.
func (w *Writers) UnknownTxs() int { return int(w.unknownTxs.Load()) }

// entSchema serializes ent's Schema.Create, which writes the generated
// package's global table definitions.
var entSchema sync.Mutex

// NewWriters opens the GORM and ent clients on env's schema and creates
// their tables.
func NewWriters(ctx context.Context, env *Env, cfg WriteConfig) (*Writers, error) {
	if env.MySQL() {
		return newMySQLWriters(ctx, env, cfg)
	}
	dbURL := env.DB.URL
	if cfg.AsyncCommit {
		// pgx takes an unknown URL parameter as a session setting.
		sep := "?"
		if strings.Contains(dbURL, "?") {
			sep = "&"
		}
		dbURL += sep + "synchronous_commit=off"
	}
	gdb, err := openGORM(ctx, gormpg.Open(dbURL))
	if err != nil {
		return nil, err
	}
	sqlDB, err := sql.Open("pgx", dbURL)
	if err != nil {
		return nil, err
	}
	return newWriters(ctx, env, cfg, gdb, sqlDB, dialect.Postgres)
}

// openGORM opens GORM on d with the outbox plugin and the writers' model
// table.
func openGORM(ctx context.Context, d gorm.Dialector) (*gorm.DB, error) {
	gdb, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, fmt.Errorf("open gorm: %w", err)
	}
	p, err := gormoutbox.New(gormoutbox.Config{})
	if err != nil {
		return nil, err
	}
	if err := gdb.Use(p); err != nil {
		return nil, fmt.Errorf("register gormoutbox: %w", err)
	}
	if err := gdb.WithContext(ctx).AutoMigrate(&gormOrder{}); err != nil {
		return nil, fmt.Errorf("gorm automigrate: %w", err)
	}
	return gdb, nil
}

// newMySQLWriters is NewWriters in MariaDB mode: GORM's MySQL driver and
// ent's MySQL dialect on go-sql-driver/mysql, on the scenario's database.
// The Writers find the dialect themselves (gormoutbox, entoutbox).
func newMySQLWriters(ctx context.Context, env *Env, cfg WriteConfig) (*Writers, error) {
	if cfg.AsyncCommit {
		return nil, errors.New("writers: AsyncCommit is PostgreSQL's synchronous_commit = off")
	}
	// The driver logs every connection a database crash or a partition
	// breaks, to stderr; the writers book those failures themselves.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	gdb, err := openGORM(ctx, gormmysql.Open(env.DB.DSN()))
	if err != nil {
		return nil, err
	}
	sqlDB, err := sql.Open("mysql", env.DB.DSN())
	if err != nil {
		return nil, err
	}
	return newWriters(ctx, env, cfg, gdb, sqlDB, dialect.MySQL)
}

// newWriters completes NewWriters with the ent client on sqlDB, of
// dialect d, and its schema.
func newWriters(ctx context.Context, env *Env, cfg WriteConfig, gdb *gorm.DB, sqlDB *sql.DB, d string) (*Writers, error) {
	client := ent.NewClient(ent.Driver(entsql.OpenDB(d, sqlDB)))
	entSchema.Lock()
	err := client.Schema.Create(ctx)
	entSchema.Unlock()
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("create ent schema: %w", err)
	}
	return &Writers{env: env, cfg: cfg, gorm: gdb, ent: client, sql: sqlDB,
		perTopic: map[string]int{}, gormCommit: map[uuid.UUID]bool{},
		unknownPerTopic: map[string]int{}, gormUnknown: map[uuid.UUID]bool{}}, nil
}

// Close closes the clients.
func (w *Writers) Close() {
	w.ent.Close()
	if db, err := w.gorm.DB(); err == nil {
		db.Close()
	}
}

// GORM returns the GORM client, for scenarios that write events of their
// own (the poison scenario).
func (w *Writers) GORM() *gorm.DB { return w.gorm }

// Committed and RolledBack count events.
func (w *Writers) Committed() int  { return int(w.committed.Load()) }
func (w *Writers) RolledBack() int { return int(w.rolledBack.Load()) }

// Run writes until cfg.Events events committed or ctx ends. It returns the
// first error of any writer: the scenarios inject no fault on the writers'
// connections, so every error is a failure.
func (w *Writers) Run(ctx context.Context) error {
	n := max(w.cfg.Writers, 1)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		quota := w.cfg.Events / n
		if i < w.cfg.Events%n {
			quota++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.writer(ctx, i, quota, start); err != nil && ctx.Err() == nil {
				cancel(fmt.Errorf("writer %d: %w", i, err))
			}
		}()
	}
	if w.cfg.LongHold > 0 {
		// The long holder has no quota: it keeps a transaction open for
		// seconds at a time until the others are done, and never gets
		// interrupted mid-transaction.
		var stop atomic.Bool
		held := make(chan error, 1)
		go func() { held <- w.longHolder(ctx, &stop) }()
		wg.Wait()
		stop.Store(true)
		if err := <-held; err != nil && ctx.Err() == nil {
			cancel(fmt.Errorf("long-holding writer: %w", err))
		}
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// errRollback makes a transaction roll back on purpose.
var errRollback = errors.New("chaos: roll back on purpose")

func (w *Writers) writer(ctx context.Context, i, quota int, start time.Time) error {
	var (
		gormOpen []*gormOrder
		entOpen  []*ent.Order
		done     int
	)
	for done < quota && ctx.Err() == nil {
		if w.cfg.Over > 0 {
			// Pace: stay at or behind an even spread of the quota.
			due := start.Add(time.Duration(float64(w.cfg.Over) * float64(done) / float64(quota)))
			if d := time.Until(due); d > 0 && !sleep(ctx, d) {
				return nil
			}
		}
		hold := w.env.Duration(0, w.cfg.HoldMax)
		rollback := w.env.Intn(100) < w.cfg.RollbackPercent
		var (
			n   int
			err error
		)
		if i%2 == 0 {
			n, gormOpen, err = w.gormTx(ctx, gormOpen, hold, rollback, nil)
		} else {
			n, entOpen, err = w.entTx(ctx, entOpen, hold, rollback)
		}
		if errors.Is(err, errUnknown) {
			// The database is likely down: give it a moment.
			w.unknownTxs.Add(1)
			if !sleep(ctx, 200*time.Millisecond) {
				return nil
			}
			continue
		}
		if err != nil {
			return err
		}
		w.txs.Add(1)
		if rollback {
			w.rolledBack.Add(int64(n))
			continue
		}
		w.committed.Add(int64(n))
		done += n
	}
	return nil
}

func (w *Writers) longHolder(ctx context.Context, stop *atomic.Bool) error {
	var open []*gormOrder
	for !stop.Load() && ctx.Err() == nil {
		rollback := w.env.Intn(100) < w.cfg.RollbackPercent
		n, next, err := w.gormTx(ctx, open, w.env.Duration(w.cfg.LongHold/2, w.cfg.LongHold), rollback, w.countOvertaken)
		if errors.Is(err, errUnknown) {
			w.unknownTxs.Add(1)
			open = next
			if !sleep(ctx, 200*time.Millisecond) {
				return nil
			}
			continue
		}
		if err != nil {
			return err
		}
		open = next
		w.txs.Add(1)
		if rollback {
			w.rolledBack.Add(int64(n))
		} else {
			w.committed.Add(int64(n))
		}
	}
	return nil
}

// gormTx places a GORM order with 1 to 3 events, or moves an open one to its
// next status with one event (an UPDATE, which locks the row).
//
// beforeCommit, if set, runs at the end of the transaction, before it
// commits, with the ids of the events it wrote.
func (w *Writers) gormTx(ctx context.Context, open []*gormOrder, hold time.Duration, rollback bool, beforeCommit func(context.Context, *gorm.DB, []uuid.UUID) error) (int, []*gormOrder, error) {
	var (
		o      *gormOrder
		create = len(open) < 3 || w.env.Intn(100) < 40
		ids    []uuid.UUID
		prev   string
	)
	record := func(typ string, payload map[string]any) {
		if w.cfg.LargePercent > 0 && w.env.Intn(100) < w.cfg.LargePercent {
			doc := make([]byte, w.cfg.LargeBytes/2)
			_, _ = crand.Read(doc)
			payload["doc"] = hex.EncodeToString(doc)
		}
		b, _ := json.Marshal(payload)
		id, _ := uuid.NewV7()
		e := txoutbox.Event{ID: id, Type: typ, Payload: b}
		if w.cfg.DelayPercent > 0 && w.env.Intn(100) < w.cfg.DelayPercent {
			e.NotBefore = time.Now().Add(w.env.Duration(w.cfg.DelayMax/4, w.cfg.DelayMax))
		}
		o.RecordEvent(e)
		ids = append(ids, id)
	}
	idx := 0
	if create {
		o = &gormOrder{Status: "placed", Total: int64(100 + w.env.Intn(10000))}
		record("order.placed", map[string]any{"total": o.Total})
		for k := w.env.Intn(3); k > 0; k-- {
			record("order.line_added", map[string]any{"sku": w.env.Intn(1000)})
		}
	} else {
		idx = w.env.Intn(len(open))
		o = open[idx]
		prev = o.Status
		o.Status = map[string]string{"placed": "paid", "paid": "shipped"}[prev]
		record("order."+o.Status, map[string]any{"from": prev})
	}
	err := w.gorm.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if create {
			err = tx.Create(o).Error
		} else {
			err = tx.Save(o).Error
		}
		if err != nil {
			return err
		}
		if !sleep(ctx, hold) {
			return ctx.Err()
		}
		if rollback {
			return errRollback
		}
		if beforeCommit != nil {
			return beforeCommit(ctx, tx, ids)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errRollback) {
		if !w.cfg.UnknownOutcomes || ctx.Err() != nil {
			return 0, open, fmt.Errorf("gorm transaction: %w", err)
		}
		// A planned rollback never sent COMMIT: nothing committed. Any
		// other transaction may have. Either way the order's state in
		// the database is unknown now: forget it.
		w.mu.Lock()
		for _, id := range ids {
			if rollback {
				w.gormCommit[id] = false
			} else {
				w.gormUnknown[id] = true
			}
		}
		if !rollback {
			w.unknownPerTopic[TopicGorm] += len(ids)
		}
		w.mu.Unlock()
		if !create {
			open = append(open[:idx], open[idx+1:]...)
		}
		return 0, open, fmt.Errorf("%w: gorm transaction: %v", errUnknown, err)
	}
	w.mu.Lock()
	for _, id := range ids {
		w.gormCommit[id] = !rollback
	}
	if !rollback {
		w.perTopic[TopicGorm] += len(ids)
	}
	w.mu.Unlock()
	switch {
	case rollback && !create:
		o.Status = prev
	case rollback:
	case create:
		open = append(open, o)
	case o.Status == "shipped":
		open = append(open[:idx], open[idx+1:]...)
	}
	return len(ids), open, nil
}

// entTx places one or two ent orders (one order.placed event each), or pays
// or cancels an open one (one event, an UPDATE that checks the status).
func (w *Writers) entTx(ctx context.Context, open []*ent.Order, hold time.Duration, rollback bool) (int, []*ent.Order, error) {
	var (
		placed []*ent.Order
		idx    = -1
		next   order.Status
		n      int
	)
	if len(open) >= 3 && w.env.Intn(100) >= 40 {
		idx = w.env.Intn(len(open))
		next = order.StatusCancelled
		if open[idx].Status == order.StatusPlaced && w.env.Intn(100) < 70 {
			next = order.StatusPaid
		}
	}
	err := entoutbox.WithTx(ctx, w.ent, func(tx *ent.Tx) error {
		if idx >= 0 {
			o := open[idx]
			u := tx.Order.UpdateOneID(o.ID).Where(order.StatusEQ(o.Status)).SetStatus(next)
			if next == order.StatusCancelled {
				u = u.SetCancelReason("chaos")
			}
			if err := u.Exec(ctx); err != nil {
				return err
			}
			n = 1
		} else {
			for k := 1 + w.env.Intn(2); k > 0; k-- {
				o, err := tx.Order.Create().SetTotal(int64(100 + w.env.Intn(10000))).Save(ctx)
				if err != nil {
					return err
				}
				placed = append(placed, o)
				n++
			}
		}
		if !sleep(ctx, hold) {
			return ctx.Err()
		}
		if rollback {
			return errRollback
		}
		return nil
	})
	if err != nil && !errors.Is(err, errRollback) {
		if !w.cfg.UnknownOutcomes || ctx.Err() != nil {
			return 0, open, fmt.Errorf("ent transaction: %w", err)
		}
		// As in gormTx. n counts the events written before the failure:
		// if the commit's reply was lost, all of them.
		if !rollback {
			w.mu.Lock()
			w.unknownPerTopic[TopicEnt] += n
			w.mu.Unlock()
		}
		if idx >= 0 {
			open = append(open[:idx], open[idx+1:]...)
		}
		return 0, open, fmt.Errorf("%w: ent transaction: %v", errUnknown, err)
	}
	if rollback {
		return n, open, nil
	}
	w.mu.Lock()
	w.perTopic[TopicEnt] += n
	w.mu.Unlock()
	if idx >= 0 {
		if next == order.StatusCancelled {
			open = append(open[:idx], open[idx+1:]...)
		} else {
			open[idx].Status = next
		}
	}
	return n, append(open, placed...), nil
}

// countOvertaken counts the events published already whose outbox ids are
// higher than those of the transaction about to commit: proof that the
// commit-order gap happened, and that the relays did not wait for it.
func (w *Writers) countOvertaken(ctx context.Context, tx *gorm.DB, ids []uuid.UUID) error {
	names, err := w.env.names()
	if err != nil {
		return err
	}
	strs := make([]string, len(ids))
	for i, id := range ids {
		strs[i] = id.String()
	}
	var mine int64
	if err := tx.Raw(w.env.q(`SELECT min(id) FROM `+names.Table+` WHERE event_id::text IN ?`), strs).Scan(&mine).Error; err != nil {
		return fmt.Errorf("own outbox ids: %w", err)
	}
	var n int64
	// Through the pool, not tx: what other sessions see committed.
	if err := w.env.DB.SQL.QueryRowContext(ctx, w.env.q(`SELECT count(*) FROM `+names.Table+` WHERE id > $1 AND state = 'published'`), mine).Scan(&n); err != nil {
		return fmt.Errorf("count overtaking events: %w", err)
	}
	w.overtaken.Add(n)
	return nil
}

// Overtaken is how many events with higher outbox ids were published while
// the long-holding writer's transactions were still open (summed over them).
func (w *Writers) Overtaken() int64 { return w.overtaken.Load() }

// Count adds events written outside the ORM writers (poison scenario) to
// the committed totals per topic.
func (w *Writers) Count(topic string, n int) {
	w.mu.Lock()
	w.perTopic[topic] += n
	w.extraEvents += n
	w.mu.Unlock()
	w.committed.Add(int64(n))
}

// Dropped books an event an operator deleted from the outbox (outbox dead
// drop): it no longer counts as committed.
func (w *Writers) Dropped(topic, eventID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.perTopic[topic]--
	if id, err := uuid.Parse(eventID); err == nil {
		delete(w.gormCommit, id)
	}
}

// CrossCheck compares what the writers believe with the database: per-topic
// committed counts, every committed GORM event id present, every rolled-back
// one absent. byID is the outbox read by the verifier. Events of a
// transaction with an unknown outcome may be present or not; if present,
// the verifier holds them to the same promise as every other event.
func (w *Writers) CrossCheck(byID map[string]dbRow) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	perTopic := map[string]int{}
	for _, r := range byID {
		perTopic[r.topic]++
	}
	var errs []error
	topics := map[string]bool{}
	for topic := range w.perTopic {
		topics[topic] = true
	}
	for topic := range w.unknownPerTopic {
		topics[topic] = true
	}
	for topic := range topics {
		n, unknown := w.perTopic[topic], w.unknownPerTopic[topic]
		if w.cfg.AsyncCommit {
			n, unknown = 0, n+unknown // a crash may have lost any commit
		}
		if got := perTopic[topic]; got < n || got > n+unknown {
			errs = append(errs, fmt.Errorf("topic %s: writers committed %d events (and %d of unknown outcome), the outbox holds %d", topic, n, unknown, got))
		}
	}
	for id, committed := range w.gormCommit {
		_, inDB := byID[id.String()]
		if committed && w.cfg.AsyncCommit {
			continue // acknowledged, and maybe lost with the WAL a crash lost
		}
		if committed != inDB {
			errs = append(errs, fmt.Errorf("gorm event %s: committed=%v but in outbox=%v", id, committed, inDB))
			if len(errs) > 10 {
				break
			}
		}
	}
	return errors.Join(errs...)
}
