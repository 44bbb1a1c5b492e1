package walrelay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// Errors Run returns when it cannot go on, for errors.Is. A relay that
// finds the slot held by another relay does not return: it waits as a
// standby.
var (
	// ErrAlreadyRunning is returned by Run when the relay is running already.
	ErrAlreadyRunning = errors.New("walrelay: already running")

	// ErrUnsupported is returned when the server cannot stream the outbox:
	// wal_level is not logical, the role lacks REPLICATION, or PostgreSQL
	// is older than 14.
	ErrUnsupported = errors.New("walrelay: the server cannot stream the outbox")

	// ErrSlotLost is returned when the slot's wal_status is "lost": the
	// server removed WAL the slot still needed (max_slot_wal_keep_size),
	// so events committed since its position may be gone from the WAL.
	// The relay never recreates the slot by itself: switch to the polling
	// relay with `outbox wal takeover`, which republishes what the table
	// still holds.
	ErrSlotLost = errors.New("walrelay: replication slot lost")

	// ErrPollingRelays is returned when polling relays are running on the
	// table while the relay would create a slot or take one over: both
	// modes would publish every event. Stop the polling relays first (a
	// WAL relay forgotten after `outbox wal takeover` stops with it).
	ErrPollingRelays = errors.New("walrelay: polling relays are running on the outbox table")

	// ErrScheduled is returned when events scheduled for later
	// (txoutbox.Event.NotBefore) wait in the table while the relay would
	// set its slot up: it publishes every unpublished row at once, so it
	// would publish them early. Wait until they are published, or keep the
	// polling relay. Once the slot streams the table, the database refuses
	// such events (txoutbox.ErrNotBeforeStreamed).
	ErrScheduled = errors.New("walrelay: events scheduled for later wait in the outbox table")

	// ErrSlotOtherDatabase is returned by Run and Takeover when the slot
	// they are given exists in another database than the one they
	// connect to: a slot name is the server's, and such a slot streams
	// another database's outbox. Neither ever streams, drops or takes
	// over such a slot; give each database's relay a slot name of its own,
	// or leave Config.Slot empty for the default, unique per database.
	ErrSlotOtherDatabase = errors.New("walrelay: the replication slot belongs to another database")

	// errSlotBusy: another relay streams from the slot, or initialises it.
	errSlotBusy = errors.New("replication slot is held by another relay")
)

// minServerVersion is the oldest PostgreSQL the WAL relay runs on (14:
// pgoutput's messages option for table-less events).
const minServerVersion = 140000

// Relay streams the outbox from a logical replication slot and publishes
// each event once the transaction that wrote it has committed, in commit
// order. Build it with New and call Run.
type Relay struct {
	cfg        Config
	connString string // the database's, as New was given it
	log        *slog.Logger
	names      outboxsql.Names
	sql        *statements // rendered for the table by New
	met        *metrics
	core       *publish.Core // builds and sends the messages, with spans and the publish metrics
	store      *publish.StoreHealth
	running    atomic.Bool

	// What a session's parts tell one another, each written by one part
	// (see streamDeps, cleanupDeps and ceilingKeeper): confirmed is the
	// position the stream has settled up to (reported to the server at
	// the next flush); active whether the session streams, for Active
	// and the metrics.
	confirmed atomic.Uint64
	active    atomic.Bool

	// ceiling is the position the slot may be confirmed up to (see
	// marker), set before a session streams and raised by its
	// ceilingKeeper.
	ceiling atomic.Uint64

	// inflight is the number of events read from the slot and not yet
	// confirmed.
	inflight atomic.Int64

	// settled is the highest id of a row the table holds as published
	// or dead, as far as this Run knows (see highestSettled).
	settled *highestSettled

	// madePublication: this Run created the publication and has set no
	// slot up through it yet. A Run that refuses to set its slot up drops
	// it (see slotSetup.dropMadePublication). Run's goroutine alone
	// reads and writes it.
	madePublication bool

	// defaultPub and defaultSlot: the names were left to their defaults,
	// which Run resolves for the database (see resolveNames). slotName
	// and pubName are the names for Slot and Publication, "" until then.
	defaultPub, defaultSlot bool
	slotName, pubName       atomic.Pointer[string]
	// legacySlot: the slot's name, left to its default, is an earlier
	// version's (see resolveNames), which the relay adopts and never
	// creates. Run's goroutine alone reads and writes it.
	legacySlot bool
	// database is the current database of the relay's connections, read
	// by resolveNames: the only database whose slot it streams or drops.
	database string
}

// New validates its arguments and returns a relay publishing through pub
// the outbox of the database connString names. It does not connect: Run
// does.
//
// connString is a libpq URL or key=value string. The relay opens its
// replication connection with replication=database added, and its other
// connections without it. The role needs the REPLICATION attribute (or
// superuser), and to own the table the first time, when the relay creates
// the publication. pub's Publish must return only once the broker
// acknowledged the message; the relay does not close it.
func New(connString string, pub message.Publisher, cfg Config) (*Relay, error) {
	if pub == nil {
		return nil, fmt.Errorf("%w: nil Publisher", ErrInvalidConfig)
	}
	r, err := newRelay(connString, cfg)
	if err != nil {
		return nil, err
	}
	if r.met, err = newMetrics(r.cfg.MeterProvider, &r.slotName, &r.active); err != nil {
		return nil, fmt.Errorf("walrelay: metrics: %w", err)
	}
	// The polling relay's publish core, so both modes send the same
	// message with the same spans and publish metrics, under this
	// package's instrumentation scope.
	cfg = r.cfg
	over := 0
	if cfg.LargePayloads.Store != nil {
		if over, err = publish.LargePayloadsOver(cfg.LargePayloads.Over, pub); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	if r.core, err = publish.New(publish.Config{
		Scope: instrumentationName, Publisher: pub, LaneBatch: cfg.LaneBatch, Table: cfg.Table,
		CloudEvents: cfg.CloudEvents.Enabled, CloudEventsSource: cfg.CloudEvents.Source,
		MeterProvider: cfg.MeterProvider, TracerProvider: cfg.TracerProvider, Propagator: cfg.Propagator, MessagingSystem: cfg.MessagingSystem,
		LargePayloads: cfg.LargePayloads.Store, LargePayloadsOver: over,
	}); err != nil {
		return nil, fmt.Errorf("walrelay: metrics: %w", err)
	}
	r.store = publish.NewStoreHealth(cfg.LargePayloads.Store)
	return r, nil
}

// newRelay validates connString and cfg and returns a relay with neither
// publisher nor metrics: New adds them, and Takeover, which publishes
// nothing, uses it as it is.
func newRelay(connString string, cfg Config) (*Relay, error) {
	if connString == "" {
		return nil, fmt.Errorf("%w: empty connection string", ErrInvalidConfig)
	}
	if _, err := pgconn.ParseConfig(connString); err != nil {
		return nil, fmt.Errorf("%w: connection string: %v", ErrInvalidConfig, err)
	}
	defaultPub, defaultSlot := cfg.Publication == "", cfg.Slot == ""
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	names, err := outboxsql.NamesFor(cfg.Table.Schema, cfg.Table.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	log := cfg.Logger
	if !defaultSlot {
		log = log.With("slot", cfg.Slot)
	}
	r := &Relay{cfg: cfg, connString: connString, log: log, names: names, sql: render(names),
		defaultPub: defaultPub, defaultSlot: defaultSlot, settled: newHighestSettled()}
	// Copies: Slot and Publication read them from other goroutines while
	// Run sets r.cfg's.
	slot, pub := cfg.Slot, cfg.Publication
	r.slotName.Store(&slot)
	r.pubName.Store(&pub)
	return r, nil
}

// tableRows returns the relay's statements on the table's rows through db.
func (r *Relay) tableRows(db pgxDB) *tableRows {
	return &tableRows{db: db, sql: r.sql, timeout: r.cfg.StatementTimeout, settled: r.settled}
}

// laneDeps is what the lanes of a session publish with, settling rows
// through db.
func (r *Relay) laneDeps(db pgxDB) laneDeps {
	return laneDeps{core: r.core, rows: r.tableRows(db), met: r.met, log: r.log,
		maxAttempts: r.cfg.MaxAttempts, backoffMin: r.cfg.BackoffMin, backoffMax: r.cfg.BackoffMax}
}

// Slot is the replication slot the relay streams from: Config.Slot, or
// with Config.Slot empty the default name Run resolves once it has
// connected (see SlotDefault and Config.Slot), "" until then.
func (r *Relay) Slot() string { return *r.slotName.Load() }

// Publication is the publication the slot decodes, as Slot.
func (r *Relay) Publication() string { return *r.pubName.Load() }

// Running reports whether Run is running.
func (r *Relay) Running() bool { return r.running.Load() }

// Active reports whether the relay holds the slot and streams from it now;
// false while it waits as a standby or reconnects.
func (r *Relay) Active() bool { return r.active.Load() }

// Health is a WAL relay's view of itself, for liveness and readiness
// probes.
type Health struct {
	// Running is Running's, Streaming Active's: a standby (Running, not
	// Streaming) is a working replica, ready to take over.
	Running   bool
	Streaming bool

	// LargePayloads is the state of the claim check's store, as the
	// polling relay's relay.Health.LargePayloads: the error of the last
	// check of a store with a method Check(ctx context.Context) error
	// (claimcheck.Store has), run when Run starts and every
	// relay.LargePayloadsCheckInterval, naming the store; nil while it
	// passes, without a claim check, or with a store that has no Check.
	// A readiness probe fails on it: events over the threshold wait
	// while it is set.
	LargePayloads error
}

// Health reports the relay's state from memory, without a query.
func (r *Relay) Health() Health {
	return Health{Running: r.Running(), Streaming: r.Active(), LargePayloads: r.store.Err()}
}

// Run checks the server, creates the publication and the slot if they do
// not exist, and streams until ctx ends; then it stops reading, lets the
// events in flight finish for up to SenderTimeout/2, reports the position
// reached and returns nil.
//
// The first relay to create the slot publishes the rows the table held
// before the slot existed (under the slot's exported snapshot) before it
// streams: switching from the polling relay loses nothing. Stop the
// polling relays first: a relay sets no slot up beside them. On a slot it
// did not make it publishes the table's unpublished rows first (see the
// package doc).
//
// Before it creates anything, Run checks the server and the table's
// schema, as the polling relay does: it returns an error matching
// migrations.ErrSchemaTooOld for a table older than this release's schema
// (run `outbox migrate up`) and one matching migrations.ErrSchemaTooNew,
// naming the version, for a table with a version this release does not
// know.
//
// One relay streams from a slot at a time: others wait and try again every
// StandbyRetry. Connection failures are retried. Run returns an error only
// for what retrying cannot fix: ErrUnsupported, ErrSlotLost,
// ErrPublication, ErrPollingRelays, ErrScheduled, ErrSlotOtherDatabase,
// the schema check's, a table or publication it cannot create.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer r.running.Store(false)
	r.settled.forget()
	r.madePublication = false
	pool, err := r.openPool(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while connecting
		}
		return err
	}
	defer pool.Close()
	srv, err := r.prepare(ctx, pool)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	var watched sync.WaitGroup
	watched.Go(func() { r.watchSlot(wctx, pool, r.database, r.cfg.StatsInterval) })
	watched.Go(func() { r.store.Run(wctx) })
	defer func() {
		stopWatch()
		watched.Wait()
	}()
	return r.sessions(ctx, pool, srv)
}

// prepare checks the server and the table's schema, and resolves the
// names left to their defaults.
func (r *Relay) prepare(ctx context.Context, pool *pgxpool.Pool) (serverFacts, error) {
	srv, err := r.checkServer(ctx, pool)
	if err == nil {
		err = r.checkSchema(ctx, pool)
	}
	if err == nil {
		err = r.resolveNames(ctx, pool)
	}
	return srv, err
}

// sessions runs sessions one after another until ctx ends (then it
// returns nil) or one fails for good: a relay that finds the slot held
// waits StandbyRetry, one whose stream broke reconnects with backoff.
func (r *Relay) sessions(ctx context.Context, pool *pgxpool.Pool, srv serverFacts) error {
	delay := r.cfg.StandbyRetry
	waiting := false
	for {
		err := r.session(ctx, pool, srv)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case isFinal(err):
			r.log.Error("WAL relay stopped", "err", err)
			return err
		case errors.Is(err, errSlotBusy):
			if !waiting {
				r.log.Info("standing by: the slot is held by another relay", "retry", r.cfg.StandbyRetry)
				waiting = true
			}
			delay = r.cfg.StandbyRetry
		default:
			waiting = false
			r.log.Warn("WAL stream interrupted; reconnecting", "err", err, "in", delay)
		}
		if !publish.Sleep(ctx, delay) {
			return nil
		}
		if !errors.Is(err, errSlotBusy) {
			delay = min(2*delay, 10*time.Second)
		}
	}
}

// isFinal reports whether err, a session's, is one retrying cannot fix.
func isFinal(err error) bool {
	for _, final := range []error{ErrSlotLost, ErrUnsupported, ErrPublication, ErrPollingRelays, ErrScheduled, ErrSlotOtherDatabase, errPermanent} {
		if errors.Is(err, final) {
			return true
		}
	}
	return false
}

// resolveNames reads the relay's database and the table's schema and
// name, and sets the names left to their defaults: SlotDefault of the
// database and table, for the publication and the slot alike, unless that
// name exists neither as a publication nor as a slot of this database and
// an earlier version's default name does (WALLegacyName: with the
// table's schema, or without it for a table given without), as the
// publication carrying the table and a slot of this database. Those are
// kept, so a relay upgraded in place goes on from its slot; a slot of
// that name in another database, once shared by every database's relays,
// is never taken. An explicit name is kept as it is: a slot of that name
// in another database is refused where the slot is read (usable,
// ErrSlotOtherDatabase). A session that finds the kept slot gone resolves
// the names again (see leaveLegacySlot).
func (r *Relay) resolveNames(ctx context.Context, q pgxQuerier) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
	defer cancel()
	var schema, name, database string
	if err := q.QueryRow(ctx, r.sql.tableNames, r.sql.table).Scan(&schema, &name, &database); err != nil {
		return fmt.Errorf("walrelay: resolve the table %s: %w", r.names.Table, err)
	}
	r.database = database
	if !r.defaultPub && !r.defaultSlot {
		return nil
	}
	keyed := outboxsql.WALName(database, schema, name)
	legacy := []string{outboxsql.WALLegacyName(schema, name)}
	if r.cfg.Table.Schema == "" {
		legacy = append(legacy, outboxsql.WALLegacyName("", name))
	}
	found, err := r.namesFound(ctx, q, append([]string{keyed}, legacy...))
	if err != nil {
		return err
	}
	choice := nameChoice{keyed: keyed, legacy: legacy, found: found}
	pub, slot := r.cfg.Publication, r.cfg.Slot
	switch {
	case r.defaultPub && r.defaultSlot:
		pub = choice.both()
		slot = pub
	case r.defaultPub:
		pub = choice.publication()
	default:
		slot = choice.slot()
	}
	r.cfg.Publication, r.cfg.Slot = pub, slot
	r.legacySlot = r.defaultSlot && slot != keyed
	r.pubName.Store(&pub)
	r.slotName.Store(&slot)
	r.log = r.cfg.Logger.With("slot", slot)
	if r.defaultSlot && slot != keyed {
		r.log.Info("kept the slot of an earlier version's default name, which exists in this database; the default now is another",
			"database", database, "default", keyed)
	}
	return nil
}

// leaveLegacySlot resolves the names again when the slot of an earlier
// version's name the relay kept is gone (an operator's Takeover while it
// stood by): a relay never creates a slot of that name, or it would
// stream beside the relays of the new default name, and every event would
// go out twice. The new names' slot is set up or waited for as on a first
// start.
func (r *Relay) leaveLegacySlot(ctx context.Context, pool *pgxpool.Pool) error {
	old := r.cfg.Slot
	if err := r.resolveNames(ctx, pool); err != nil {
		return err
	}
	if r.cfg.Slot == old {
		return nil // made again meanwhile: adopted as before
	}
	// What this Run knew is of the slot and publication it leaves.
	r.madePublication = false
	r.settled.forget()
	r.log.Info("the slot of an earlier version's default name is gone; going on under the default name", "earlier", old)
	return nil
}

// nameChoice chooses a name left to its default: keyed, the default,
// unless it does not exist and one of legacy, the names of earlier
// versions, does (see resolveNames).
type nameChoice struct {
	keyed  string
	legacy []string
	found  map[string]nameFound
}

// both is the name of a publication and a slot both left to their
// defaults: an earlier one only when it is the publication carrying the
// table and a slot of this database.
func (c nameChoice) both() string {
	if f := c.found[c.keyed]; f.publication || f.slot {
		return c.keyed
	}
	for _, old := range c.legacy {
		if f := c.found[old]; f.carries && f.slot {
			return old
		}
	}
	return c.keyed
}

// publication is the name of a publication left to its default.
func (c nameChoice) publication() string {
	if c.found[c.keyed].publication {
		return c.keyed
	}
	for _, old := range c.legacy {
		if c.found[old].carries {
			return old
		}
	}
	return c.keyed
}

// slot is the name of a slot left to its default.
func (c nameChoice) slot() string {
	if c.found[c.keyed].slot {
		return c.keyed
	}
	for _, old := range c.legacy {
		if c.found[old].slot {
			return old
		}
	}
	return c.keyed
}

// nameFound is what exists of a name (see outboxsql.WALNames).
type nameFound struct {
	publication bool // a publication of the name exists
	carries     bool // and carries the table
	slot        bool // a slot of the name exists in this database
}

// namesFound looks names up.
func (r *Relay) namesFound(ctx context.Context, q pgxQuerier, names []string) (map[string]nameFound, error) {
	rows, err := q.Query(ctx, r.sql.names, outboxsql.NamesArgs{Table: r.sql.table, Names: names}.Args()...)
	if err != nil {
		return nil, fmt.Errorf("walrelay: look up the default names: %w", err)
	}
	defer rows.Close()
	out := map[string]nameFound{}
	for rows.Next() {
		var (
			n string
			f nameFound
		)
		if err := rows.Scan(&n, &f.publication, &f.carries, &f.slot); err != nil {
			return nil, fmt.Errorf("walrelay: look up the default names: %w", err)
		}
		out[n] = f
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("walrelay: look up the default names: %w", err)
	}
	return out, nil
}

// errPermanent marks errors retrying does not fix.
var errPermanent = errors.New("permanent")

// openPool opens the relay's regular (non-replication) connections.
func (r *Relay) openPool(ctx context.Context) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(r.connString)
	if err != nil {
		return nil, fmt.Errorf("%w: connection string: %v", ErrInvalidConfig, err)
	}
	delete(pc.ConnConfig.RuntimeParams, "replication")
	pc.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(r.cfg.StatementTimeout.Milliseconds(), 10)
	pc.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(r.cfg.StatementTimeout.Milliseconds(), 10)
	pc.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("walrelay: connect: %w", err)
	}
	return pool, nil
}

// replicationConfig is the replication connection's configuration.
func (r *Relay) replicationConfig() (*pgconn.Config, error) {
	c, err := pgconn.ParseConfig(r.connString)
	if err != nil {
		return nil, fmt.Errorf("%w: connection string: %v", ErrInvalidConfig, err)
	}
	c.RuntimeParams["replication"] = "database"
	// The server frees the slot of a relay it has not heard from for this
	// long; standbys take over after it.
	c.RuntimeParams["wal_sender_timeout"] = strconv.FormatInt(r.cfg.SenderTimeout.Milliseconds(), 10)
	// Text output of the decoded rows, as the decoder parses it.
	c.RuntimeParams["datestyle"] = "ISO, YMD"
	c.RuntimeParams["timezone"] = "UTC"
	c.RuntimeParams["bytea_output"] = "hex"
	return c, nil
}

// checkServer refuses servers that cannot stream the outbox, with the fix,
// and returns what it read of the server.
func (r *Relay) checkServer(ctx context.Context, pool *pgxpool.Pool) (serverFacts, error) {
	info, err := readServerFacts(ctx, pool)
	if err != nil {
		return info, err
	}
	if err := info.check(); err != nil {
		return info, err
	}
	return info, info.checkFailover(r.cfg.Failover)
}

// columnListVersion is the first server_version_num with publication
// column lists (PostgreSQL 15).
const columnListVersion = 150000

// checkFailover refuses Failover before PostgreSQL 17, which has no
// failover slots.
func (f serverFacts) checkFailover(failover bool) error {
	if failover && f.VersionNum < 170000 {
		return fmt.Errorf("%w: Failover needs PostgreSQL 17 (failover slots); this is %d.%d", ErrUnsupported, f.VersionNum/10000, f.VersionNum%10000)
	}
	return nil
}

// serverFacts are what the WAL relay needs to know of a server.
type serverFacts struct {
	VersionNum  int    // server_version_num, e.g. 150004
	WALLevel    string // wal_level
	Replication bool   // the current role has REPLICATION or is superuser
}

// readServerFacts reads serverFacts through pool.
func readServerFacts(ctx context.Context, pool *pgxpool.Pool) (serverFacts, error) {
	var f serverFacts
	if err := pool.QueryRow(ctx, outboxsql.WALServer).Scan(&f.VersionNum, &f.WALLevel, &f.Replication); err != nil {
		return f, fmt.Errorf("walrelay: read server settings: %w", err)
	}
	return f, nil
}

// check returns an error matching ErrUnsupported that says what to change
// when the server cannot stream the outbox.
func (f serverFacts) check() error {
	switch {
	case f.VersionNum < minServerVersion:
		return fmt.Errorf("%w: PostgreSQL %d.%d is older than 14; use the polling relay", ErrUnsupported, f.VersionNum/10000, f.VersionNum%10000)
	case f.WALLevel != "logical":
		return fmt.Errorf("%w: wal_level is %q, not \"logical\": set wal_level = logical (RDS: rds.logical_replication = 1; Cloud SQL: cloudsql.logical_decoding = on) and restart PostgreSQL", ErrUnsupported, f.WALLevel)
	case !f.Replication:
		return fmt.Errorf("%w: the role lacks the REPLICATION attribute: ALTER ROLE ... WITH REPLICATION (RDS: GRANT rds_replication)", ErrUnsupported)
	}
	return nil
}
