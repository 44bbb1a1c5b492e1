package relay

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/partitions"
	"github.com/txoutbox/txoutbox/migrations"
	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// ErrAlreadyRunning is returned by Run when the relay is running already.
var ErrAlreadyRunning = errors.New("relay: already running")

// ErrWALStreams is returned by Run when a WAL relay's slot (package
// walrelay) streams the outbox table: the two modes would both publish
// every event. Hand the outbox over first (walrelay.Takeover, `outbox wal
// takeover`). A slot that appears while the relay runs makes it claim
// nothing, logging this error, until the slot is gone.
var ErrWALStreams = errors.New("relay: a WAL relay streams the outbox table")

// ErrPublishTimeout is the recorded error of an event whose publish call
// outlived Config.PublishTimeout: its outcome is unknown, and it is retried.
var ErrPublishTimeout = errors.New("relay: publish outlived PublishTimeout; outcome unknown")

// Relay publishes the outbox. Build it with New and call Run; several relays,
// in one process or many, may run against one table at once.
//
// A Relay is the wiring of its parts, each owning its state: the
// membership (incarnation, heartbeat, shards), the claimer (claims, handing
// rows to the lanes), the budget (what is held in flight), the lanes
// (publishing in aggregate order, fences), the completer (recording
// outcomes), the claim cycle's SQL both of them call (claimDB), the
// outage and stall trackers the lanes feed, the lockout (the table locked
// by another session) every loop heeds, and the listener, pruner, claim
// floor (with the repairer) and sampler (stats) loops.
type Relay struct {
	db    *sql.DB
	pub   message.Publisher
	cfg   Config
	sql   *statements
	log   *slog.Logger
	met   *metrics
	core  *publish.Core // builds and sends the messages, with spans and the publish metrics
	clock *clock
	wake  chan struct{} // signalled by NOTIFY and new shards: claim now
	// claims is the table's claim cycle in the database, which the
	// claimer and every Run's completer run.
	claims claimDB

	members  *membership
	claimer  *claimer
	budget   *budget
	outage   *outage
	stall    *stall
	listener *listener
	pruner   *pruner
	floor    *floorRaiser
	repairer *repairer
	sampler  *sampler
	// mysqlStats reads Stats on MySQL; nil on PostgreSQL.
	mysqlStats *mysqlHouseDB
	tables     tableDB // the table as a whole: the lockout's probe, the schema and grants checks
	lockout    *lockout
	// store is the claim check's store's health; checkStore is false in
	// a Group, whose one loop checks the store all its relays share.
	store      *publish.StoreHealth
	checkStore bool

	running atomic.Bool
}

// New validates cfg and returns a relay that reads the outbox through db and
// publishes through pub.
//
// db is a database/sql pool; a pgx pool converts with stdlib.OpenDBFromPool.
// With the pgx driver the relay holds one connection for LISTEN; with another
// driver, or one wrapped by instrumentation, it polls. A relay uses up to
// nine connections at once (claims, marks, heartbeats, the claim floor,
// LISTEN, three stats readings, pruning): give its pool at least that many idle
// connections (db.SetMaxIdleConns), or database/sql's default of two makes
// it reconnect constantly. A pool bounded (db.SetMaxOpenConns, as it is
// when New is called) below MinOpenConns is refused with ErrInvalidConfig:
// LISTEN holds one connection for good, and a claim, a mark and a
// heartbeat run at once; starved of them, the relay would publish nothing.
//
// pub is any Watermill publisher; its Publish must return only once the
// broker acknowledged the message (watermill-kafka's does; see
// kafkapub.NewPublisher). The relay does not close it.
func New(db *sql.DB, pub message.Publisher, cfg Config) (*Relay, error) {
	return newRelay(db, pub, cfg, nil)
}

// newRelay is New with the connections its claims borrow: a Group's
// claimConns, or nil for the pool's.
func newRelay(db *sql.DB, pub message.Publisher, cfg Config, conns *claimConns) (*Relay, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db is nil", ErrInvalidConfig)
	}
	if pub == nil {
		return nil, fmt.Errorf("%w: publisher is nil", ErrInvalidConfig)
	}
	dialect, err := detectDialect(db)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	onMySQL := dialect == txoutbox.MySQL
	if onMySQL {
		if conns != nil {
			return nil, fmt.Errorf("%w: a Group does not run on MySQL yet (see docs/mysql.md)", ErrInvalidConfig)
		}
		cfg.DisableListen = true // no LISTEN/NOTIFY: the relay polls
		if cfg.PollInterval == 0 {
			cfg.PollInterval = max(PollIntervalMySQLDefault, cfg.ClaimCooldown)
		}
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := checkPool(db, cfg.DisableListen); err != nil {
		return nil, err
	}
	names, err := outboxsql.NamesForDialect(outboxsql.Dialect(dialect), cfg.Table.Schema, cfg.Table.Name)
	if err != nil {
		if onMySQL {
			return nil, fmt.Errorf("%w: %w (see docs/mysql.md)", ErrInvalidConfig, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	schema, err := migrations.New(db, migrations.Config{Table: cfg.Table, Dialect: dialect})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	met, err := newMetrics(cfg.MeterProvider, publish.TableValue(cfg.Table))
	if err != nil {
		return nil, fmt.Errorf("relay: metrics: %w", err)
	}
	over := 0
	if cfg.LargePayloads.Store != nil {
		if over, err = publish.LargePayloadsOver(cfg.LargePayloads.Over, pub); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	core, err := publish.New(publish.Config{
		Scope: instrumentationName, Publisher: pub, LaneBatch: cfg.LaneBatch, Table: cfg.Table,
		CloudEvents: cfg.CloudEvents.Enabled, CloudEventsSource: cfg.CloudEvents.Source,
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Propagator: cfg.Propagator, MessagingSystem: cfg.MessagingSystem,
		LargePayloads: cfg.LargePayloads.Store, LargePayloadsOver: over,
	})
	if err != nil {
		return nil, fmt.Errorf("relay: metrics: %w", err)
	}
	q := render(names, outboxsql.WALLegacyName(cfg.Table.Schema, cfg.Table.Name))
	r := &Relay{
		db:    db,
		pub:   pub,
		cfg:   cfg,
		sql:   q,
		log:   cfg.Logger.With("relay", cfg.ID, "table", publish.TableValue(cfg.Table)),
		met:   met,
		core:  core,
		clock: &clock{base: time.Now()},
		wake:  make(chan struct{}, 1),

		store:      publish.NewStoreHealth(cfg.LargePayloads.Store),
		checkStore: true,
	}
	r.budget = newBudget(cfg.MaxInFlight, cfg.MaxInFlightBytes)
	r.outage = &outage{clock: r.clock, log: r.log}
	r.stall = &stall{clock: r.clock, timeout: cfg.PublishTimeout}
	var (
		members memberDB
		house   interface {
			pruneDB
			statsDB
			repairDB
			floorDB
		}
	)
	if onMySQL {
		mtx := &mysqlTx{db: db, timeout: cfg.StatementTimeout, lock: cfg.LockTimeout}
		r.tables = &mysqlTableDB{tx: mtx, names: names, table: cmp.Or(cfg.Table.Name, outboxsql.TableNameDefault), schema: schema}
		r.lockout = newLockout(r.tables, r.clock, r.log, met, cfg)
		mtx.out = r.lockout
		members = &mysqlMemberDB{tx: mtx, names: names}
		r.claims = newMySQLClaimDB(mtx, names)
		r.mysqlStats = &mysqlHouseDB{tx: mtx, names: names}
		house = r.mysqlStats
	} else {
		r.tables = newPGTableDB(db, q, schema, cfg)
		r.lockout = newLockout(r.tables, r.clock, r.log, met, cfg)
		tx := &tableTx{db: db, settings: r.sql.txTimeouts, walkSQL: r.sql.walkSettings, timeout: cfg.StatementTimeout, lock: cfg.LockTimeout, out: r.lockout}
		members = newPGMemberDB(db, tx, r.sql, cfg)
		r.claims = newPGClaimDB(db, conns, tx, r.sql, cfg)
		house = newPGHouseDB(db, tx, r.sql,
			partitions.Table{Names: names, Schema: cfg.Table.Schema, Name: cmp.Or(cfg.Table.Name, outboxsql.TableNameDefault)}, cfg)
	}
	r.members = newMembership(members, r.sql.table, &r.cfg, r.log, r.clock, r.wake)
	r.members.stalled = r.stall.stalled
	r.members.lockout = r.lockout
	low, claimed := new(atomic.Int64), new(atomic.Int64)
	r.claimer = newClaimer(claimerDeps{
		db: r.claims, cfg: cfg, log: r.log, met: met, clock: r.clock,
		members: r.members, stalled: r.stall.stalled, budget: r.budget, outage: r.outage, wake: r.wake, low: low, claimed: claimed,
		lockout: r.lockout,
	})
	r.listener = &listener{db: db, channel: cfg.Table.Channel(), log: r.log, disabled: cfg.DisableListen, poll: cfg.PollInterval,
		wake: r.wake, rebalance: r.members.rebalanceNow}
	r.pruner = &pruner{db: house, cfg: cfg, log: r.log, lockout: r.lockout}
	r.repairer = &repairer{db: house, members: r.members, window: cfg.BatchSize, timeout: cfg.StatementTimeout,
		log: r.log, met: met, lockout: r.lockout}
	r.floor = &floorRaiser{db: house, interval: cfg.HeartbeatInterval, timeout: cfg.StatementTimeout,
		log: r.log, lockout: r.lockout, low: low, claimed: claimed, perProof: int64(cfg.BatchSize), repair: r.repairer}
	r.sampler = &sampler{db: house, cfg: cfg, log: r.log, met: met, lockout: r.lockout}
	return r, nil
}

// ID returns the relay's id (Config.ID). In the relays table, lease_owner
// and the shards' owner the relay appears as "<id>#<random>": one
// incarnation per Run, and a new one after it was declared dead.
func (r *Relay) ID() string { return r.cfg.ID }

// Run publishes the outbox until ctx ends, then shuts down cleanly: it
// stops claiming, lets publishes already sent to the broker finish (for up
// to PublishTimeout; a publish still running then is left behind), records
// their outcome, returns the rest of its claimed rows to pending, and gives
// up its shards so peers take over at once. It never marks an event the
// broker did not acknowledge.
//
// Before anything else it checks the table's schema: it returns an error
// matching migrations.ErrSchemaTooOld when a version of this release's
// outbox schema is not applied (run `outbox migrate up`), and one matching
// migrations.ErrSchemaTooNew, naming the version, when a version this
// release does not know is (see migrations.Migrator.Check).
//
// Run does not return on database or broker errors: it logs them, backs off
// and resumes when they heal (at start, it waits to read the schema's
// version). It returns nil after a clean shutdown, ErrAlreadyRunning,
// ErrWALStreams, or the schema check's error.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer r.running.Store(false)
	if ok, err := r.awaitSchema(ctx); !ok {
		return err
	}
	// A Run before this one may have given up recording outcomes at
	// shutdown (the database gone): those rows are its incarnation's, to be
	// taken over, not this run's.
	r.budget.reset()
	r.outage.reset()
	r.stall.reset()
	r.lockout.reset()
	r.claimer.reset()
	if err := r.members.checkMode(ctx); err != nil {
		return err
	}
	_, batching := r.pub.(BatchPublisher)
	r.log.Info("relay starting", "lanes", r.cfg.Lanes, "batch", r.cfg.BatchSize,
		"lane_batch", r.cfg.LaneBatch, "batch_publisher", batching)

	unregister, err := r.met.observe(r.members.owned.Load, r.outage.lasted, r.lockout.lasted)
	if err != nil {
		r.log.Warn("relay: metrics callback not registered", "err", err)
	}

	completer := newCompleter(r.completerDeps())
	lanes := make(laneSet, r.cfg.Lanes)
	deps := laneDeps{core: r.core, clock: r.clock, timeout: r.cfg.PublishTimeout, log: r.log,
		completer: completer, budget: r.budget, outage: r.outage, stall: r.stall}
	var lanesDone sync.WaitGroup
	for i := range lanes {
		lanes[i] = newLane(deps, r.cfg.MaxInFlight)
		lanesDone.Add(1)
		go func(l *lane) {
			defer lanesDone.Done()
			l.run(ctx)
		}(lanes[i])
	}
	completerDone := make(chan struct{})
	go func() {
		defer close(completerDone)
		completer.run()
	}()

	var background sync.WaitGroup
	loops := []func(context.Context){r.members.run, r.listener.run, r.pruner.run, r.sampler.run, r.floor.run, r.lockout.run}
	if r.checkStore {
		loops = append(loops, r.store.Run)
	}
	for _, loop := range loops {
		background.Add(1)
		go func() {
			defer background.Done()
			loop(ctx)
		}()
	}

	r.claimer.run(ctx, lanes) // returns when ctx ends

	for _, l := range lanes {
		close(l.queue)
	}
	lanesDone.Wait()
	completer.close()
	<-completerDone
	background.Wait()
	r.members.leave()
	if unregister != nil {
		_ = unregister()
	}
	r.log.Info("relay stopped")
	return nil
}

// completerDeps is the completer's wiring: a Run builds a completer of its
// own from it.
func (r *Relay) completerDeps() completerDeps {
	return completerDeps{db: r.claims, cfg: r.cfg, log: r.log, met: r.met, budget: r.budget, lastClaim: r.claimer.lastSeq,
		lockout: r.lockout}
}

// MinOpenConns is the fewest connections a relay, or a Group, needs its
// pool to allow at once: one held by LISTEN and three for a claim, a mark
// and a heartbeat running together; one fewer with Config.DisableListen.
// New and NewGroup refuse a pool bounded below it. It is a floor, not a
// size: see New and Group for the connections a relay uses when busy.
const MinOpenConns = 4

// poolNeed is the connections a relay needs at once: MinOpenConns, one
// fewer without LISTEN.
func poolNeed(noListen bool) int {
	if noListen {
		return MinOpenConns - 1
	}
	return MinOpenConns
}

// checkPool fails with ErrInvalidConfig when db's pool is bounded below
// poolNeed.
func checkPool(db *sql.DB, noListen bool) error {
	need := poolNeed(noListen)
	if n := db.Stats().MaxOpenConnections; n > 0 && n < need {
		return fmt.Errorf("%w: the pool allows %d open connection(s) (db.SetMaxOpenConns); a relay needs at least %d at once "+
			"(LISTEN holds one for good; a claim, a mark and a heartbeat run together)", ErrInvalidConfig, n, need)
	}
	return nil
}

// detectDialect is txoutbox.DetectDialect, bounded: a probe of the
// server for a driver DialectOf does not know, as migrations.New makes.
func detectDialect(db *sql.DB) (txoutbox.Dialect, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return txoutbox.DetectDialect(ctx, db)
}

// signal does a non-blocking send on a wake-up channel of capacity 1.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
