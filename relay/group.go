package relay

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// DiscoverIntervalDefault is GroupConfig.DiscoverInterval's default.
const DiscoverIntervalDefault = 30 * time.Second

// DiscoverIntervalFloor is GroupConfig.DiscoverInterval's floor: a
// discovery reads the catalog of every schema, and one more often than
// that would keep a connection of a group of many tenants busy.
const DiscoverIntervalFloor = 100 * time.Millisecond

// GroupConfig configures a Group: the relay of every table, and which
// schemas' tables it serves. One of Schemas and SchemaPattern is required.
type GroupConfig struct {
	// Relay configures the relay of each table. Its Table.Schema must be
	// empty: each table's schema is one the group selects, and Table.Name
	// is the table's name in all of them (default "outbox"). Its ID
	// (default host-pid-random, once for the group) is every table's
	// relay's: the relays tables are per outbox table, so an ID needs to
	// be unique among the running relays of each table, and a group
	// restarted under the same ID gets each table's shards back.
	Relay Config

	// Schemas lists the schemas whose outbox tables the group serves.
	// A schema's name may be any PostgreSQL allows (see txoutbox.Table).
	Schemas []string

	// SchemaPattern selects the schemas by name instead, in path.Match's
	// syntax: "*" matches any run of characters, "?" one, "[a-k]" one of a
	// class; "tenant_*" selects every schema whose name starts tenant_.
	// Unlike path.Match's, "*" and "?" match "/" too: any name PostgreSQL
	// allows is matched, spaces, quotes, dots and non-ASCII letters
	// included. A class is negated with "^" ("[^x]"), not "!" as in a shell:
	// "[!x]" is a class of "!" and "x"; "\" quotes the character after it
	// ("\*" matches a "*"). Names match exactly as the catalog stores them,
	// case-sensitively: an unquoted Tenant_A is stored tenant_a. It is
	// matched in Go against the catalog's schema names, never put into SQL.
	SchemaPattern string

	// DiscoverInterval is how often the group looks for the tables to
	// serve again, besides at start: a table that appeared (a new tenant's,
	// once migrated) gets a relay, one that is gone (its schema dropped)
	// has its relay stopped. Default 30s; at least DiscoverIntervalFloor
	// (100ms).
	DiscoverInterval time.Duration

	// ClaimConns is how many connections the group keeps out of the pool
	// for its tables' claims, which take turns on them (default
	// ClaimConnsDefault, 4; at least 1). Each table's claim is prepared
	// and planned on each connection that runs it, and again after every
	// vacuum of the table: kept to a few connections, a hundred tables'
	// claims cost a few hundred plans a minute, not thousands (see
	// Group). A claim that waits half a second while none of them comes
	// back (all held by claims waiting on locks, for Relay.LockTimeout at
	// most) takes a pool connection.
	//
	// With the pool bounded (db.SetMaxOpenConns, set before NewGroup), the
	// default is at most a quarter of the bound, and a ClaimConns that
	// leaves fewer than LISTEN, a mark and a heartbeat need beside it is
	// refused.
	ClaimConns int
}

// Group publishes many outbox tables of one database, one per schema (a
// schema per tenant): a Relay for each table it finds, built by New from
// GroupConfig.Relay, sharing the pool, the publisher and, for LISTEN, one
// connection. Each table keeps every guarantee of a Relay (its shards,
// membership, leases, fences, ordering, claim gate and floor, pruning):
// each table's relay is exactly a Relay, and shares nothing with the
// others that could hold it back but the pool, the claim connections and
// the publisher.
//
// Fairness: every table's relay claims in its own loop, at most a batch
// at a time and at most MaxInFlight rows held, and publishes on its own
// lanes, so a table with a large backlog holds at most one claim
// connection, its own ~7 pool connections and Lanes publish calls; the
// others' claims and publishes queue beside them, not behind its backlog.
//
// Connections: one for LISTEN, whatever the number of tables, ClaimConns
// for the claims of all tables, and the relays' other statements on the
// shared pool. Each table's relay uses up to seven pool connections at
// once beside its claim (marks, heartbeats, the claim floor, three stats
// readings, pruning), so N tables could use 1 + ClaimConns + 7N (8N when
// claims waiting on locks hold every claim connection and the others take
// the pool's),
// each statement a connection only while it runs: bound the pool with
// db.SetMaxOpenConns (and give it as many idle connections, with
// db.SetMaxIdleConns, or it reconnects constantly). A relay whose
// statement waits for a connection is slowed, never wrong: every
// statement runs under StatementTimeout, which includes that wait. The
// LISTEN connection is one of the pool's, counted by SetMaxOpenConns.
//
// Locks: a table another session holds locked (an ALTER TABLE, a VACUUM
// FULL, a stuck migration, on the table or its relays, shards or claim
// floor) costs its own tenant only. Its statements wait
// Config.LockTimeout at most for the lock, and the first that gives up
// locks the table out: its relay runs nothing on it but a probe that
// holds a connection for a moment, until the lock is gone (see
// Config.LockTimeout). So the pool and the claim connections stay the
// other tables', which keep their latency; the locked table shows in
// Health (Locked), the log and the metrics.
// Idle tables' rounds fall at random points of their intervals, so they
// share a small pool; size it from the busy tables.
//
// Each table costs background statements even when idle (heartbeats,
// claim floor, repair, polls, stats, prune: several a second at default
// intervals), and a table written to about six round trips per NOTIFY.
// For many idle tenants raise PollInterval and HeartbeatInterval (and
// StaleAfter with it): LISTEN still wakes a table's relay the moment rows
// commit. docs/operating.md ("Many outboxes") counts them.
// Each table's statements are its own (they name its schema), prepared on
// each connection that runs them. A vacuum or analyze of a table
// invalidates its claim's plan on every connection that holds it, and
// planning the claim costs many times what running it does. So the claims
// of every table take turns on a few connections the group keeps out of
// the pool (GroupConfig.ClaimConns, default 4), each table's claim planned
// on those few rather than on every connection of the pool. A claim that
// waits half a second while none comes back (all held by claims waiting
// on locks) takes a pool connection. The other statements run on the pool; their
// plans are cheap. pgx caches 512 prepared statements a connection, one
// of them each table's claim (the claim's settings statement is one for
// all tables): past about 500 tables written to, a claim connection
// prepares and plans claims again as they fall out of its cache. pgx's
// statement_cache_capacity, in the connection string, raises the bound;
// each statement cached holds its plan in the server's memory.
//
// Writers: a writer whose Table names the schema (Table{Schema: "tenant_a"})
// announces its rows on that table's channel and wakes that table's relay
// only. One whose Table has no schema, writing through its connection's
// search_path (WriterConfig's default Table{}, and gormoutbox's and
// entoutbox's), announces them on the unqualified channel, which cannot
// say which schema's table the rows are in: the group listens on it too
// and wakes every table's relay, each of which then claims once (one short
// statement each, finding nothing in all tables but one). That is cheap
// for tens of tables and adds up for thousands of busy ones: set the
// schema on the writer's table to wake only its relay.
type Group struct {
	db    *sql.DB
	pub   message.Publisher
	cfg   GroupConfig // defaults set
	log   *slog.Logger
	find  *finder
	hub   *hub        // nil with DisableListen
	conns *claimConns // lent to every table's claims
	// store is the claim check's store's health, checked by Run for
	// every table's relay: they share the store.
	store *publish.StoreHealth

	mu       sync.Mutex
	children map[string]*child // by schema; guarded by mu
	ended    []*child          // relays that stopped on their own, out of children, for discover to report; guarded by mu
	skipped  map[string]string // schema → why it is not served, as last logged; only Run's goroutine touches it

	running atomic.Bool
}

// child is the relay of one table while it runs.
type child struct {
	relay *Relay
	stop  context.CancelFunc
	done  chan struct{} // closed once Run returned
	err   error         // Run's, once done
}

// NewGroup validates cfg and returns a group that serves the outbox tables
// cfg selects through db, publishing through pub. The requirements on db
// and pub are New's (a pool bounded below MinOpenConns is refused with
// ErrInvalidConfig); see Group for the connections it needs.
func NewGroup(db *sql.DB, pub message.Publisher, cfg GroupConfig) (*Group, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db is nil", ErrInvalidConfig)
	}
	if pub == nil {
		return nil, fmt.Errorf("%w: publisher is nil", ErrInvalidConfig)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := checkPool(db, cfg.Relay.DisableListen); err != nil {
		return nil, err
	}
	if err := refuseMySQL(db); err != nil {
		return nil, err
	}
	claimConns, err := groupClaimConns(db, cfg)
	if err != nil {
		return nil, err
	}
	cfg.ClaimConns = claimConns
	cfg.Relay.setDefaults() // one ID for every table
	if cfg.DiscoverInterval == 0 {
		cfg.DiscoverInterval = DiscoverIntervalDefault
	}
	find, err := newFinder(db, cfg)
	if err != nil {
		return nil, err
	}
	g := &Group{
		db: db, pub: pub, cfg: cfg,
		log:      cfg.Relay.Logger.With("relay", cfg.Relay.ID),
		find:     find,
		conns:    newClaimConns(db, claimConns, cfg.Relay.LockTimeout),
		children: map[string]*child{},
		skipped:  map[string]string{},
		store:    publish.NewStoreHealth(cfg.Relay.LargePayloads.Store),
	}
	if !cfg.Relay.DisableListen {
		g.hub = newHub(db, g.log, cfg.Relay.PollInterval, txoutbox.Table{Name: cfg.Relay.Table.Name}.Channel())
	}
	return g, nil
}

// groupClaimConns is how many claim connections the group keeps: its
// ClaimConns, or the default, lowered under a bounded pool so that a
// relay's other statements (LISTEN, a mark, a heartbeat) still find
// connections.
func groupClaimConns(db *sql.DB, cfg GroupConfig) (int, error) {
	bound := db.Stats().MaxOpenConnections // 0: no bound
	room := cfg.MaxClaimConns(bound)
	switch {
	case cfg.ClaimConns == 0 && bound > 0:
		// A quarter of the bound at most, so the relays' other statements
		// (heartbeats above all) keep most of the pool.
		return min(ClaimConnsDefault, max(1, (bound-1)/4)), nil
	case cfg.ClaimConns == 0:
		return ClaimConnsDefault, nil
	case bound > 0 && cfg.ClaimConns > room:
		return 0, fmt.Errorf("%w: ClaimConns is %d, and the pool allows %d open connections (db.SetMaxOpenConns): "+
			"a mark, a heartbeat and LISTEN (unless disabled) need %d beside them", ErrInvalidConfig, cfg.ClaimConns, bound, bound-room)
	}
	return cfg.ClaimConns, nil
}

// MaxClaimConns is the most ClaimConns NewGroup accepts for a pool that
// allows maxOpenConns open connections (db.SetMaxOpenConns, above 0): the
// claim connections replace a claim's own share of MinOpenConns, and the
// rest (LISTEN unless disabled, a mark, a heartbeat) stays in the pool.
func (c GroupConfig) MaxClaimConns(maxOpenConns int) int {
	return maxOpenConns - (poolNeed(c.Relay.DisableListen) - 1)
}

// Validate reports whether NewGroup accepts c, with its zero fields taken
// as their defaults; the error matches ErrInvalidConfig. c is not changed.
func (c GroupConfig) Validate() error { return c.validate() }

func (c *GroupConfig) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if c.Relay.Table.Schema != "" {
		return bad("Relay.Table.Schema is %q: a group's schemas come from Schemas or SchemaPattern; leave it empty", c.Relay.Table.Schema)
	}
	if err := c.Relay.Validate(); err != nil {
		return err
	}
	switch {
	case len(c.Schemas) > 0 && c.SchemaPattern != "":
		return bad("both Schemas and SchemaPattern are set: give one")
	case len(c.Schemas) == 0 && c.SchemaPattern == "":
		return bad("neither Schemas nor SchemaPattern is set: give one")
	}
	seen := map[string]bool{}
	for _, s := range c.Schemas {
		if err := (txoutbox.Table{Schema: s, Name: c.Relay.Table.Name}).Validate(); err != nil {
			return fmt.Errorf("%w: Schemas: %w", ErrInvalidConfig, err)
		}
		if seen[s] {
			return bad("Schemas lists %q twice", s)
		}
		seen[s] = true
	}
	if c.SchemaPattern != "" {
		if _, err := compilePattern(c.SchemaPattern); err != nil {
			return bad("SchemaPattern %v", err)
		}
	}
	if c.DiscoverInterval != 0 && c.DiscoverInterval < DiscoverIntervalFloor {
		return bad("DiscoverInterval %s is below its floor %s", c.DiscoverInterval, DiscoverIntervalFloor)
	}
	if c.ClaimConns < 0 {
		return bad("ClaimConns %d is below its floor 1", c.ClaimConns)
	}
	return nil
}

// Running reports whether Run is running: from its start until it
// returns.
func (g *Group) Running() bool { return g.running.Load() }

// ID returns the ID every table's relay runs under (Config.ID).
func (g *Group) ID() string { return g.cfg.Relay.ID }

// Tables returns the tables the group serves now, in schema order.
func (g *Group) Tables() []txoutbox.Table {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]txoutbox.Table, 0, len(g.children))
	for _, c := range g.children {
		out = append(out, c.relay.cfg.Table)
	}
	slices.SortFunc(out, func(a, b txoutbox.Table) int { return cmp.Compare(a.Schema, b.Schema) })
	return out
}

// TableHealth is the Health of one table's relay.
type TableHealth struct {
	Table txoutbox.Table
	Health
}

// Health reports the health of every table's relay (see Relay.Health),
// in schema order.
func (g *Group) Health() []TableHealth {
	g.mu.Lock()
	relays := make([]*Relay, 0, len(g.children))
	for _, c := range g.children {
		relays = append(relays, c.relay)
	}
	g.mu.Unlock()
	out := make([]TableHealth, len(relays))
	for i, r := range relays {
		out[i] = TableHealth{Table: r.cfg.Table, Health: r.Health()}
	}
	slices.SortFunc(out, func(a, b TableHealth) int { return cmp.Compare(a.Table.Schema, b.Table.Schema) })
	return out
}

// Run serves the tables until ctx ends, then stops every table's relay
// as Relay.Run does and returns nil, or ErrAlreadyRunning. It finds the
// tables at start and every DiscoverInterval; a failed look (the database
// away) keeps serving the tables found before. A table without the outbox
// schema (not migrated yet), or whose schema its relay refuses (older than
// this release's, or with a version it does not know: see Relay.Run), is
// logged (at Warn, once per reason) and left alone until it is migrated;
// so is a table a WAL relay streams (its relay's Run returned
// ErrWALStreams). Both are looked at again at every discovery. Neither is in Tables or Health, so neither holds back
// the readiness of the tables served.
//
// A table's relay whose Run returned any other error on its own (none
// does today) is taken out of Tables and Health as well, logged at Error,
// and started again at the next discovery.
func (g *Group) Run(ctx context.Context) error {
	if !g.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer g.running.Store(false)
	var hubDone sync.WaitGroup
	hubCtx, stopHub := context.WithCancel(context.WithoutCancel(ctx))
	if g.hub != nil {
		hubDone.Add(1)
		go func() {
			defer hubDone.Done()
			g.hub.run(hubCtx)
		}()
	}
	var storeDone sync.WaitGroup
	storeDone.Go(func() { g.store.Run(ctx) })
	g.log.Info("relay group starting", "table", g.cfg.Relay.Table.Name, "schemas", g.describe(), "discover_interval", g.cfg.DiscoverInterval, "claim_conns", cap(g.conns.slots))
	t := time.NewTicker(g.cfg.DiscoverInterval)
	defer t.Stop()
	for {
		g.discover(ctx)
		if !tick(ctx, t.C) {
			break
		}
	}
	g.mu.Lock()
	stopping := make([]*child, 0, len(g.children))
	for schema, c := range g.children {
		stopping = append(stopping, c)
		delete(g.children, schema)
	}
	g.mu.Unlock()
	g.stop(stopping...)
	g.conns.close()
	// The hub outlives the relays: they hand their shards over, and the
	// peers they announce it to listen too.
	stopHub()
	hubDone.Wait()
	storeDone.Wait()
	g.log.Info("relay group stopped")
	return nil
}

// describe names what the group selects, for the log: the pattern, or
// the schemas listed, each as ident.Readable shows it.
func (g *Group) describe() string {
	if g.cfg.SchemaPattern != "" {
		return g.cfg.SchemaPattern
	}
	names := make([]string, len(g.cfg.Schemas))
	for i, s := range g.cfg.Schemas {
		names[i] = ident.Readable(s)
	}
	return strings.Join(names, ", ")
}

// discover finds the tables to serve, starts a relay for each new one and
// stops those of the tables gone.
func (g *Group) discover(ctx context.Context) {
	found, err := g.find.tables(ctx)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("relay: look for outbox tables failed; serving the tables found before", "err", err)
		}
		return
	}
	want := map[string]txoutbox.Table{}
	for _, f := range found {
		switch {
		case !f.Exists:
			g.skip(f.Table, "no outbox table")
		case !f.Migrated:
			g.skip(f.Table, "not migrated (the relays, shards and claim floor tables of schema version 8 are missing): run outbox migrate up")
		default:
			want[f.Table.Schema] = f.Table
		}
	}
	g.mu.Lock()
	ended := g.ended
	g.ended = nil
	g.mu.Unlock()
	for _, c := range ended {
		// It stopped on its own: tried again below if the table is still
		// there.
		if errors.Is(c.err, ErrWALStreams) {
			g.skip(c.relay.cfg.Table, walStreamsReason+c.err.Error())
			continue
		}
		if schemaErr(c.err) {
			g.skip(c.relay.cfg.Table, c.err.Error())
			continue
		}
		g.log.Error("relay: a table's relay stopped; starting it again", "table", publish.TableValue(c.relay.cfg.Table), "err", c.err)
	}
	g.mu.Lock()
	var gone []*child
	for schema, c := range g.children {
		if _, ok := want[schema]; !ok {
			gone = append(gone, c)
			delete(g.children, schema)
		}
	}
	g.mu.Unlock()
	if len(gone) > 0 {
		for _, c := range gone {
			g.log.Info("relay: outbox table gone; stopping its relay", "table", publish.TableValue(c.relay.cfg.Table))
		}
		g.stop(gone...)
	}
	for schema, table := range want {
		g.mu.Lock()
		_, running := g.children[schema]
		g.mu.Unlock()
		if !running {
			g.start(ctx, table)
		}
	}
}

// walStreamsReason starts the reason a table is skipped for while a WAL
// relay streams it.
const walStreamsReason = "a WAL relay streams it: "

// skip logs, once per reason, that a selected schema's table is not
// served.
func (g *Group) skip(t txoutbox.Table, why string) {
	if g.skipped[t.Schema] == why {
		return
	}
	g.skipped[t.Schema] = why
	g.log.Warn("relay: not serving a selected schema's table", "table", publish.TableValue(t), "reason", why)
}

// start builds and runs the relay of table.
func (g *Group) start(ctx context.Context, table txoutbox.Table) {
	cfg := g.cfg.Relay
	cfg.Table = table
	r, err := newRelay(g.db, g.pub, cfg, g.conns)
	if err != nil {
		g.skip(table, err.Error())
		return
	}
	r.store, r.checkStore = g.store, false
	// A table whose schema the relay would refuse is not served, nor
	// shown in Health for the moment its Run would take to refuse it. A
	// check that fails otherwise is Run's to try again.
	if err := r.checkSchema(ctx); schemaErr(err) {
		g.skip(table, err.Error())
		return
	}
	if strings.HasPrefix(g.skipped[table.Schema], walStreamsReason) {
		// Look before serving it, so that a table still streamed does not
		// show in Health, not ready, for the moment its Run would take to
		// refuse it.
		if err := r.members.checkMode(ctx); err != nil {
			g.skip(table, walStreamsReason+err.Error())
			return
		}
	}
	delete(g.skipped, table.Schema)
	if g.hub != nil {
		r.listener.disabled = true // the hub listens for it
		g.hub.add(table.Channel(), subscriber{wake: r.wake, rebalance: r.members.rebalanceNow})
	}
	runCtx, stop := context.WithCancel(ctx)
	c := &child{relay: r, stop: stop, done: make(chan struct{})}
	g.mu.Lock()
	g.children[table.Schema] = c
	g.mu.Unlock()
	go func() {
		defer close(c.done)
		c.err = r.Run(runCtx)
		if runCtx.Err() != nil {
			return // stopped by the group
		}
		// Stopped on its own: out of Tables and Health at once. Its
		// channel is let go under mu, so that a relay discover starts
		// for the table again (once it is out of children) keeps its.
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.children[table.Schema] == c {
			delete(g.children, table.Schema)
			g.ended = append(g.ended, c)
			if g.hub != nil {
				g.hub.remove(table.Channel())
			}
		}
	}()
}

// stop stops the relays of cs, all at once, and waits for them.
func (g *Group) stop(cs ...*child) {
	for _, c := range cs {
		c.stop()
	}
	for _, c := range cs {
		<-c.done
		if g.hub != nil {
			g.hub.remove(c.relay.cfg.Table.Channel())
		}
	}
}

// FoundTable is one schema a GroupConfig selects, as FindTables found it.
type FoundTable struct {
	// Table is the schema's outbox table.
	Table txoutbox.Table
	// Exists is whether the table is there; a schema Schemas lists that
	// does not exist has neither the table nor the schema.
	Exists bool
	// Migrated is whether the table has the companions a relay needs (its
	// relays, shards and claim floor tables, schema version 8): a Group
	// serves it.
	Migrated bool
}

// FindTables lists the schemas cfg selects (Schemas, SchemaPattern), in
// schema order, with their outbox table's state: what a Group would serve,
// and what `outbox migrate up --schemas` migrates. A schema listed in
// Schemas is in the list whether it exists or not; every one SchemaPattern
// selects is there once it exists, whatever its name (PostgreSQL's names
// are all valid schemas of a txoutbox.Table). The statement reads the
// catalogs only and runs under cfg.Relay.StatementTimeout.
func FindTables(ctx context.Context, db *sql.DB, cfg GroupConfig) ([]FoundTable, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db is nil", ErrInvalidConfig)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := refuseMySQL(db); err != nil {
		return nil, err
	}
	cfg.Relay.setDefaults()
	f, err := newFinder(db, cfg)
	if err != nil {
		return nil, err
	}
	return f.tables(ctx)
}

// finder reads which of the schemas a GroupConfig selects hold an outbox
// table, and in which state.
type finder struct {
	db      *sql.DB
	cfg     GroupConfig    // validated, with defaults
	pattern *regexp.Regexp // cfg.SchemaPattern's; nil without one
}

// newFinder is the finder of cfg, validated.
func newFinder(db *sql.DB, cfg GroupConfig) (*finder, error) {
	f := &finder{db: db, cfg: cfg}
	if cfg.SchemaPattern != "" {
		var err error
		if f.pattern, err = compilePattern(cfg.SchemaPattern); err != nil {
			return nil, fmt.Errorf("%w: SchemaPattern %w", ErrInvalidConfig, err)
		}
	}
	return f, nil
}

func (f *finder) tables(ctx context.Context) ([]FoundTable, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Relay.StatementTimeout)
	defer cancel()
	name := f.cfg.Relay.Table.Name
	if name == "" {
		name = txoutbox.TableNameDefault
	}
	rows, err := f.db.QueryContext(ctx, outboxsql.Schemas, outboxsql.SchemasArgs{Name: name}.Args()...)
	if err != nil {
		return nil, fmt.Errorf("list schemas: %w", err)
	}
	defer rows.Close()
	byName := map[string]FoundTable{}
	var out []FoundTable
	for rows.Next() {
		var ft FoundTable
		if err := rows.Scan(&ft.Table.Schema, &ft.Exists, &ft.Migrated); err != nil {
			return nil, fmt.Errorf("list schemas: %w", err)
		}
		ft.Table.Name = f.cfg.Relay.Table.Name
		ft.Migrated = ft.Exists && ft.Migrated
		if f.pattern != nil {
			if f.pattern.MatchString(ft.Table.Schema) {
				out = append(out, ft)
			}
			continue
		}
		byName[ft.Table.Schema] = ft
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list schemas: %w", err)
	}
	for _, s := range f.cfg.Schemas {
		ft, ok := byName[s]
		if !ok {
			ft = FoundTable{Table: txoutbox.Table{Schema: s, Name: f.cfg.Relay.Table.Name}}
		}
		out = append(out, ft)
	}
	slices.SortFunc(out, func(a, b FoundTable) int { return cmp.Compare(a.Table.Schema, b.Table.Schema) })
	return out, nil
}

// refuseMySQL fails with ErrInvalidConfig when db's driver is MySQL's: a
// Group does not run there yet (see docs/mysql.md).
func refuseMySQL(db *sql.DB) error {
	if d, err := txoutbox.DialectOf(db); err == nil && d == txoutbox.MySQL {
		return fmt.Errorf("%w: NewGroup and FindTables do not run on MySQL yet: run a relay per table (relay.New; see docs/mysql.md)", ErrInvalidConfig)
	}
	return nil
}
