package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/grants"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/migrations"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
	"github.com/txoutbox/txoutbox/relay/walrelay"
)

func runRelay(ctx context.Context, proc *process, fs *flag.FlagSet, args []string) error {
	stdout := proc.stdout
	var (
		common      commonFlags
		kafka       kafkaFlags
		cfg         relay.Config
		logLevel    = fs.String("log-level", "info", "debug, info, warn or error")
		metricsAddr = fs.String("metrics-addr", "", "serve /metrics (Prometheus), /healthz and /readyz on this address, e.g. :9464 (empty: off)")
	)
	var schemas schemasFlag
	common.register(fs)
	schemas.register(fs)
	kafka.register(fs)
	schemas.registerDiscover(fs)
	maxConns := fs.Int("max-conns", 0, fmt.Sprintf("most database connections open at once (0: no bound, or %d with --schemas; at least %d, %d with --no-listen: "+
		"LISTEN holds one, a claim, a mark and a heartbeat run together); each table's relay runs up to eight statements at once",
		groupMaxConnsDefault, relay.MinOpenConns, relay.MinOpenConns-1))
	claimConns := fs.Int("claim-conns", 0, fmt.Sprintf("with --schemas: connections kept for the tables' claims, which take turns on them (0: %d, fewer under a small --max-conns; at most --max-conns - %d)",
		relay.ClaimConnsDefault, relay.MinOpenConns-1))
	mode := fs.String("mode", "poll", "poll: claim rows from the table; wal: stream them from a logical replication slot (needs wal_level = logical)")
	var wal walFlags
	wal.register(fs)
	var large largePayloadFlags
	large.register(fs)
	fs.StringVar(&cfg.ID, "id", "", "relay id, unique among running relays; may stay the same across restarts (default host-pid-random)")
	fs.IntVar(&cfg.BatchSize, "batch", relay.BatchSizeDefault, "rows per claim")
	fs.Int64Var(&cfg.BatchBytes, "batch-bytes", relay.BatchBytesDefault, "payload bytes per claim (at least one row)")
	fs.Int64Var(&cfg.MaxInFlightBytes, "max-in-flight-bytes", 0, "payload bytes of claimed events held in memory (0: 2 × --batch-bytes)")
	fs.IntVar(&cfg.Lanes, "lanes", relay.LanesDefault, "events published concurrently")
	fs.IntVar(&cfg.LaneBatch, "lane-batch", relay.LaneBatchDefault, "most events a lane sends to Kafka at once, of distinct aggregates (1: one at a time)")
	fs.IntVar(&cfg.MaxAttempts, "max-attempts", relay.MaxAttemptsDefault, "failed publishes before an event the broker refuses is dead (an outage never makes one dead)")
	fs.DurationVar(&cfg.PollInterval, "poll-interval", 0, "poll for due rows this often when not woken by NOTIFY (0: 1s on PostgreSQL, 50ms on MySQL/MariaDB, which have no NOTIFY)")
	fs.DurationVar(&cfg.ClaimCooldown, "claim-cooldown", 0, "least time after a claim that came back short before the next, to gather a steady stream's rows (0: 25ms, or --poll-interval if shorter)")
	fs.BoolVar(&cfg.DisableListen, "no-listen", false, "do not LISTEN; poll only (for PgBouncer in transaction mode)")
	fs.DurationVar(&cfg.LeaseDuration, "lease", relay.LeaseDurationDefault, "how long a claim holds rows")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat", relay.HeartbeatIntervalDefault, "heartbeat and rebalance interval")
	fs.DurationVar(&cfg.StaleAfter, "stale-after", relay.StaleAfterDefault, "declare a relay dead after its heartbeat is this old")
	fs.DurationVar(&cfg.BackoffMin, "backoff-min", relay.BackoffMinDefault, "first retry delay of a failed event")
	fs.DurationVar(&cfg.BackoffMax, "backoff-max", relay.BackoffMaxDefault, "longest retry delay")
	fs.DurationVar(&cfg.OutageBackoffMax, "outage-backoff-max", relay.OutageBackoffMaxDefault, "longest retry delay after a failure for an outage (not the event's fault)")
	fs.DurationVar(&cfg.Retention, "retention", relay.RetentionDefault, "keep published rows this long (negative: never prune)")
	fs.DurationVar(&cfg.PruneInterval, "prune-interval", relay.PruneIntervalDefault, "prune published rows past --retention this often (polling mode)")
	fs.DurationVar(&cfg.StatementTimeout, "statement-timeout", relay.StatementTimeoutDefault, "bound every statement, lock wait and idle transaction of the relay")
	fs.DurationVar(&cfg.LockTimeout, "lock-timeout", 0, fmt.Sprintf("a statement waiting longer for a lock another session holds on a table (ALTER TABLE, VACUUM FULL, a migration) gives up, "+
		"and the relay runs nothing on that table until the lock is gone; with --schemas the other tables go on (0: %s, or --statement-timeout if shorter; at least %s)",
		relay.LockTimeoutDefault, relay.LockTimeoutFloor))
	fs.DurationVar(&cfg.PublishTimeout, "publish-timeout", relay.PublishTimeoutDefault, "a publish not answered after this counts as failed; a relay whose publishes all hang gives its shards up (/readyz fails)")
	fs.BoolVar(&cfg.CloudEvents.Enabled, "cloudevents", false, "add CloudEvents binary-mode headers (ce_specversion, ce_id, ce_type, ce_source, ce_time, content-type)")
	fs.StringVar(&cfg.CloudEvents.Source, "cloudevents-source", "", "ce_source of the CloudEvents headers (default /txoutbox/<table>)")
	if err := proc.parseFlagsOnly(fs, args); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("--log-level: %v", err)
	}
	table, err := common.outboxTable()
	if err != nil {
		return err
	}
	cfg.Table = table
	logger := slog.New(slog.NewTextHandler(proc.stderr, &slog.HandlerOptions{Level: level}))
	if common.json {
		logger = slog.New(slog.NewJSONHandler(proc.stderr, &slog.HandlerOptions{Level: level}))
	}
	cfg.Logger = logger
	kcfg, err := kafka.config(logger)
	if err != nil {
		return err
	}
	store, err := large.open(ctx, fs)
	if err != nil {
		return err
	}
	if store != nil {
		defer store.Close()
		cfg.LargePayloads = relay.LargePayloadsConfig{Store: store, Over: large.over}
	}
	if *mode != "wal" {
		// The WAL relay's bound on events in flight bounds the polling
		// relay's claimed rows too.
		cfg.MaxInFlight = wal.maxInFlight
	}
	// Validate everything before anything starts: the database and a
	// broker are touched only once every flag is good.
	if err := cfg.Validate(); err != nil {
		return flagUsage(err)
	}
	if *maxConns < 0 {
		return usagef("--max-conns is negative (%d)", *maxConns)
	}
	if need := relay.MinOpenConns - boolInt(cfg.DisableListen); *maxConns > 0 && *maxConns < need {
		return usagef("--max-conns %d: a relay needs at least %d connections at once (LISTEN holds one for good; a claim, a mark and a heartbeat run together)",
			*maxConns, need)
	}
	if *claimConns < 0 {
		return usagef("--claim-conns is negative (%d)", *claimConns)
	}
	if *claimConns > 0 && !schemas.set() {
		return usagef("--claim-conns is for a relay of many tables (--schemas); one table's claims take the pool's connections")
	}
	if common.mysql() {
		// The polling relay runs on MySQL/MariaDB; a group of tables and
		// the WAL relay do not (yet).
		switch {
		case *mode == "wal":
			return usagef("--mode wal: reads PostgreSQL's write-ahead log; on MySQL/MariaDB run --mode poll (see docs/mysql.md)")
		case schemas.set():
			return usagef("--schemas: a relay of many tables does not run on MySQL/MariaDB yet, where a schema is a database: run a relay per database, each named in --database-url (see docs/mysql.md)")
		}
	}
	var gcfg relay.GroupConfig
	if schemas.set() {
		if *mode != "poll" {
			return usagef("--schemas: WAL mode serves one table; run a relay group with --mode poll")
		}
		if gcfg, err = schemas.groupConfig(&common, cfg); err != nil {
			return err
		}
		if *maxConns == 0 {
			*maxConns = groupMaxConnsDefault
		}
		// NewGroup's rule, checked before anything is opened.
		if room := gcfg.MaxClaimConns(*maxConns); *claimConns > room {
			return usagef("--claim-conns %d: with --max-conns %d at most %d (LISTEN, a mark and a heartbeat need connections beside them)",
				*claimConns, *maxConns, room)
		}
		gcfg.ClaimConns = *claimConns
	}
	var wcfg walrelay.Config
	switch *mode {
	case "poll":
	case "wal":
		if wcfg, err = wal.config(fs, cfg, common.databaseURL); err != nil {
			return err
		}
	default:
		return usagef("--mode %q: want poll or wal", *mode)
	}
	addrs := splitList(kafka.brokers)
	switch {
	case len(addrs) > 0 && kafka.devBroker:
		return usagef("--dev-broker starts an embedded broker instead of --brokers/KAFKA_BROKERS (%s): give one or the other", strings.Join(addrs, ","))
	case len(addrs) == 0 && !kafka.devBroker:
		// Publishing real rows into a broker that vanishes on exit would
		// mark them published and lose them: never the default.
		return usagef("no Kafka brokers: set --brokers or %s (or KAFKA_BROKERS) to publish to a cluster, or pass --dev-broker to publish into an embedded in-memory broker that loses everything on exit (development only)", envName("brokers"))
	}
	if common.databaseURL == "" {
		return usagef("no database: pass --database-url or set DATABASE_URL")
	}
	tp, stopTracing, err := tracing(ctx, proc.lookupEnv)
	if err != nil {
		return err
	}
	defer stopTracing()
	cfg.TracerProvider = tp
	var metricsSrv *metricsServer
	if *metricsAddr != "" {
		if metricsSrv, err = newMetricsServer(*metricsAddr); err != nil {
			return err
		}
		defer metricsSrv.shutdown()
		cfg.MeterProvider = metricsSrv.mp
		metricsSrv.largePayloads = store != nil
	}

	// The database, its grants and its schema, before any broker.
	db, err := common.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	var found []relay.FoundTable
	switch {
	case schemas.set():
		// Each table's schema is checked as the group finds it.
		if found, err = findTables(ctx, db, gcfg, schemas.value); err != nil {
			return err
		}
	case *mode == "wal":
		if err := checkRelaySchema(ctx, db, common.databaseURL, table, cfg.StatementTimeout); err != nil {
			return err
		}
		db.Close() // the WAL relay opens connections of its own
	default:
		if err := checkRelayGrants(ctx, db, common.mysql(), table, cfg.StatementTimeout); err != nil {
			return err
		}
		if err := checkRelaySchema(ctx, db, common.databaseURL, table, cfg.StatementTimeout); err != nil {
			return err
		}
	}

	if kafka.devBroker {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
		if err != nil {
			return fmt.Errorf("start embedded broker: %w", err)
		}
		defer cluster.Close()
		addrs = cluster.ListenAddrs()
		logger.Warn("DEVELOPMENT BROKER: --dev-broker started an embedded in-memory Kafka-protocol broker (kfake); "+
			"events published to it are marked published in the outbox and LOST when this process exits", "brokers", strings.Join(addrs, ","))
	}

	pruneCtx, stopPrune := context.WithCancel(ctx)
	defer startLargePayloads(pruneCtx, store, logger)() // waits, after stopPrune has run
	defer stopPrune()

	if *mode == "wal" {
		wcfg.TracerProvider = tp
		return runWALRelay(ctx, stdout, common.databaseURL, wcfg, cfg.ID, addrs, kcfg, logger, metricsSrv)
	}
	out := publishing{stdout: stdout, addrs: addrs, kafka: kafka, kcfg: kcfg, logger: logger, metrics: metricsSrv}
	db.SetMaxIdleConns(max(10, *maxConns)) // a relay's loops use up to nine connections at once
	db.SetMaxOpenConns(*maxConns)
	if schemas.set() {
		logger.Info("connected to the database", "database", redactDatabaseURL(common.databaseURL), "schemas", schemas.value, "max_conns", *maxConns)
		// Set after the group's configuration was checked.
		gcfg.Relay.MeterProvider, gcfg.Relay.TracerProvider = cfg.MeterProvider, cfg.TracerProvider
		return runGroup(ctx, out, db, gcfg, schemas.value, found)
	}
	logger.Info("connected to the database", "database", redactDatabaseURL(common.databaseURL), "table", table.String())
	return publish(ctx, out, table.String(),
		func(pub *kafkapub.Publisher) (*relay.Relay, error) { return relay.New(db, pub, cfg) },
		func(r *relay.Relay) { metricsSrv.serve(r, db, logger) })
}

// checkRelayGrants refuses, before any broker is touched, a database
// user that lacks a privilege the relay needs on the outbox tables, naming
// each with the GRANT that gives it: PostgreSQL's catalogs answer
// (grants.Check), or MySQL's information_schema (grants.CheckMySQL).
func checkRelayGrants(ctx context.Context, db *sql.DB, mysql bool, table txoutbox.Table, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if mysql {
		names, err := outboxsql.MySQLNamesFor(table.Schema, table.Name)
		if err != nil {
			return usagef("%v", err)
		}
		return grants.CheckMySQL(ctx, db, "the relay", grants.Relay(names))
	}
	names, err := outboxsql.NamesFor(table.Schema, table.Name)
	if err != nil {
		return usagef("%v", err)
	}
	return grants.Check(ctx, db, "the relay", grants.Relay(names))
}

// checkRelaySchema refuses, before any broker is touched, a table whose
// schema the relays refuse: they need this release's newest version, and
// Run checks it again.
func checkRelaySchema(ctx context.Context, db *sql.DB, databaseURL string, table txoutbox.Table, timeout time.Duration) error {
	m, err := migrations.New(db, migrations.Config{Table: table})
	if err != nil {
		return usagef("%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	need := migrations.Outbox.Latest()
	if isMySQL(databaseURL) {
		need = migrations.Outbox.MySQLLatest()
	}
	return m.Check(ctx, need)
}

// publishing is what a relay and a group of relays share to run: where
// they publish, what they log and where they serve their probes.
type publishing struct {
	stdout  io.Writer
	addrs   []string
	kafka   kafkaFlags
	kcfg    kafkapub.Config
	logger  *slog.Logger
	metrics *metricsServer // nil without --metrics-addr
}

// publish connects to Kafka and runs the relay, or group of relays,
// newRunner makes on the publisher until ctx ends, with its probes served
// by serve when p has a metrics server; stdout says what it publishes and,
// once it stopped, after how long. A runner New refuses is a usage error.
func publish[R interface {
	ID() string
	Run(context.Context) error
}](ctx context.Context, p publishing, what string, newRunner func(*kafkapub.Publisher) (R, error), serve func(R)) error {
	pub, closeKafka, err := connectKafka(p.addrs, p.kcfg, p.logger)
	if err != nil {
		return err
	}
	defer closeKafka()
	p.logger.Info("connected to kafka", p.kafka.logAttrs(p.addrs)...)
	r, err := newRunner(pub)
	if err != nil {
		return usagef("%s", pathFlags(err.Error()))
	}
	if p.metrics != nil {
		serve(r)
		p.logger.Info("serving /metrics, /healthz and /readyz", "addr", p.metrics.ln.Addr().String())
	}
	fmt.Fprintf(p.stdout, "relay %s publishing %s to %s\n", r.ID(), what, strings.Join(p.addrs, ","))
	start := time.Now()
	if err := r.Run(ctx); err != nil {
		return err
	}
	fmt.Fprintf(p.stdout, "relay %s stopped after %s\n", r.ID(), time.Since(start).Round(time.Second))
	return nil
}

// groupMaxConnsDefault bounds the pool of `outbox relay --schemas`
// unless --max-conns says otherwise: enough for a few busy tables among
// many idle ones (see relay.Group).
const groupMaxConnsDefault = 40

// runGroup is `outbox relay --schemas`: a relay.Group over the tables
// cfg selects, found at start (found: a pattern that selects no schema at
// all fails the start, exit 1, as status and migrate up do: a typo should
// fail the deployment, not page someone later) and again every
// DiscoverInterval. One that selects schemas none of which has a migrated
// outbox table yet (tenants to come) starts, with a warning, and is not
// ready (/readyz) while it serves no table.
func runGroup(ctx context.Context, out publishing, db *sql.DB, cfg relay.GroupConfig, selected string, found []relay.FoundTable) error {
	servable := 0
	for _, f := range found {
		if f.Migrated {
			servable++
		}
	}
	if servable == 0 {
		out.logger.Warn("no selected schema has a migrated outbox table yet: serving none, and not ready (/readyz), until one has (outbox migrate up --schemas)",
			"schemas", selected, "selected", len(found))
	}
	what := fmt.Sprintf("the %s tables of schemas %s", tableNameOnly(cfg.Relay.Table), selected)
	return publish(ctx, out, what,
		func(pub *kafkapub.Publisher) (*relay.Group, error) { return relay.NewGroup(db, pub, cfg) },
		func(g *relay.Group) { out.metrics.serveGroup(g, db, out.logger) })
}

// boolInt is 1 for true, 0 for false.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// tableNameOnly is t's name, the default when empty.
func tableNameOnly(t txoutbox.Table) string {
	if t.Name == "" {
		return txoutbox.TableNameDefault
	}
	return t.Name
}

// saramaLogger forwards Sarama's package-level logger to the running
// relay's slog logger. Sarama reads sarama.Logger from its goroutines, so it
// is installed once, before any publisher exists, and only its target
// changes.
var saramaTarget atomic.Pointer[sarama.StdLogger]

func init() {
	sarama.Logger = saramaForwarder{}
}

type saramaForwarder struct{}

func (saramaForwarder) Print(v ...any) {
	if l := saramaTarget.Load(); l != nil {
		(*l).Print(v...)
	}
}

func (saramaForwarder) Printf(format string, v ...any) {
	if l := saramaTarget.Load(); l != nil {
		(*l).Printf(format, v...)
	}
}

func (saramaForwarder) Println(v ...any) {
	if l := saramaTarget.Load(); l != nil {
		(*l).Println(v...)
	}
}

// connectKafka sends Sarama's log to logger and connects a publisher to
// addrs; closeKafka closes it and detaches the log again.
func connectKafka(addrs []string, kcfg kafkapub.Config, logger *slog.Logger) (pub *kafkapub.Publisher, closeKafka func(), err error) {
	sl := kafkapub.SaramaLogger(logger)
	saramaTarget.Store(&sl)
	pub, err = kafkapub.NewPublisher(addrs, kcfg)
	if err != nil {
		saramaTarget.Store(nil)
		return nil, nil, fmt.Errorf("connect to kafka (%s): %w", strings.Join(addrs, ","), err)
	}
	return pub, func() {
		pub.Close()
		saramaTarget.Store(nil)
	}, nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}
