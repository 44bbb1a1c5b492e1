// Command chaos runs the end-to-end crash, outage and concurrency scenarios
// of package integration outside `go test`, and prints one result line per
// scenario and a final total:
//
//	go run ./integration/chaos                 # every scenario, CI-sized (~6 minutes)
//	go run ./integration/chaos -soak           # every fault at once over 1,000,000 events
//	go run ./integration/chaos -run crash -seed 42
//	go run ./integration/chaos -broker kafka   # the same faults on the real 3-node Apache Kafka cluster
//	go run ./integration/chaos -db mariadb     # the faults that apply on MariaDB, on a mariadbd of its own (see mariaDBPlans)
//	go run ./integration/chaos -db mariadb -scale  # dead-prune on MariaDB at full size (mariaDBScales)
//	go run ./integration/chaos -scale          # the scale scenarios, about an hour (see harness.Scale), and the store's two-minute outage
//
//	chaos: committed=N rolled_back=M delivered_unique=N lost=0 phantom=0 order_violations=0 duplicates=D dead=P crashes=K same_id_restarts=S pauses=Z partitions=X admin_ops=A db_crashes=C broker=kfake
//
// It needs PostgreSQL (-database-url, default $DATABASE_URL, else the local
// server with trust auth) and the Go toolchain, to build the relay CLI and
// the broker process; the claim check's scenarios (large-payloads,
// store-outage) the S3 server of .ci/services too (testkit.S3Server's). Each scenario works in a fresh schema of the database
// txoutbox_chaos, dropped afterwards unless it failed. The scenarios that
// crash PostgreSQL (db-crash, mixed, and so the soak) run on a cluster of
// their own instead, created and started if missing (pg_createcluster 15
// chaos --port 5439, see -cluster-port; needs root or the postgres user),
// so nothing else on the shared server is hit. Exit status 1 means a broken
// promise: a lost, phantom or out-of-order event, or too many duplicates.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/txoutbox/integration/internal/harness"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

const database = "txoutbox_chaos"

func main() {
	var (
		dbURL  = flag.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL server URL (default $DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres)")
		soak   = flag.Bool("soak", false, "run only the crash scenario, with 1,000,000 events")
		scale  = flag.Bool("scale", false, "run the scale scenarios instead: a 15-minute broker outage, 50,000 aggregates in backoff, 1,000,000 dead rows under pruning, a 10,000,000-row backlog, asynchronous commits under database crashes, a 1,000,000-event transaction and a DBA at work in WAL mode, 99 tenants writing beside one with a 1,000,000-event backlog, and 185 tenants writing beside 15 held locked for a minute (about an hour)")
		seed   = flag.Uint64("seed", 0, "random seed (default: the clock)")
		only   = flag.String("run", "", "run only the scenarios whose name contains this")
		keep   = flag.Bool("keep", false, "keep the scenario directories (logs, broker data) and schemas")
		mode   = flag.String("mode", "poll", "relay mode: poll, or wal (the WAL relay's scenarios: kills, same-id restarts, database crashes, partitions, broker outage, slow broker, commit order without row locks, two databases with takeovers)")
		cport  = flag.Int("cluster-port", testkit.ChaosCluster.Port, "port of the PostgreSQL cluster \"chaos\" the database-crash scenarios run on (created if missing)")
		dbKind = flag.String("db", "postgres", "the database: postgres, or mariadb (the polling relay's scenarios whose faults apply on MySQL/MariaDB, on a mariadbd of the suite's own, port 3307, created in "+testkit.ChaosMySQLd.Dir+" on first use and SIGKILLed by db-crash and mixed; with -scale, dead-prune)")
		brk    = flag.String("broker", harness.BrokerKfake, "the broker: kfake (a kfakeproc child per scenario) or kafka (the real 3-node Apache Kafka cluster of .ci/services, or "+kafkatest.EnvClusterBrokers+"; its nodes are killed, paused and partitioned)")
	)
	flag.Parse()
	if *dbURL == "" {
		*dbURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cluster := testkit.ChaosCluster
	cluster.Port = *cport
	if *mode != "poll" && *mode != harness.WALMode {
		log.Fatalf("chaos: -mode %q: want poll or wal", *mode)
	}
	var kafka []string
	switch *brk {
	case harness.BrokerKfake:
	case harness.BrokerKafka:
		// The scenarios kill and pause the cluster's nodes: no test may
		// use it meanwhile.
		unlock, err := kafkatest.LockClusterFile(true)
		if err != nil {
			log.Fatalf("chaos: %v", err)
		}
		defer unlock()
		kafka = kafkatest.ClusterBrokers()
	default:
		log.Fatalf("chaos: -broker %q: want kfake or kafka", *brk)
	}
	ps, scales := plans(*soak, *mode), []harness.Scale(nil)
	if *scale {
		ps, scales = scalePlans()
	}
	var mysqld *testkit.MySQLd
	switch *dbKind {
	case "postgres":
	case "mariadb":
		if *mode != "poll" {
			log.Fatalf("chaos: -db mariadb runs the polling relay's scenarios: no -mode wal")
		}
		ps, mysqld = mariaDBPlans(*soak), &testkit.ChaosMySQLd
		if *scale {
			ps, scales = nil, mariaDBScales()
		}
	default:
		log.Fatalf("chaos: -db %q: want postgres or mariadb", *dbKind)
	}
	if err := run(ctx, *dbURL, cluster, mysqld, kafka, *seed, ps, scales, *only, *keep); err != nil {
		log.SetFlags(0)
		log.Fatalf("chaos: %v", err)
	}
}

func plans(soak bool, mode string) []harness.Plan {
	if mode == harness.WALMode {
		return walPlans()
	}
	if soak {
		// Every fault at once: plain kills, same-id restarts, pauses with
		// a slow broker, partitions, operators at work, database crashes.
		return []harness.Plan{harness.Mixed(harness.Size{Events: 1_000_000})}
	}
	return []harness.Plan{
		harness.Crash(harness.Size{Events: 8000, Over: 25 * time.Second}, 10),
		harness.CommitGap(harness.Size{Events: 2500, Over: 12 * time.Second}),
		harness.Delayed(harness.Size{Events: 3000, Over: 12 * time.Second}, 4, 3*time.Second),
		harness.BrokerOutage(harness.Size{Events: 4000, Over: 24 * time.Second}, 10*time.Second),
		harness.DBConnLoss(harness.Size{Events: 3000, Over: 12 * time.Second}, 5),
		harness.Poison(harness.Size{Events: 2000, Over: 10 * time.Second}, 3),
		harness.Rebalance(harness.Size{Events: 4000, Over: 20 * time.Second}, 8),
		harness.WithInbox(harness.Crash(harness.Size{Events: 2500, Over: 8 * time.Second}, 3)),
		harness.SameIDRestart(harness.Size{Events: 5000, Over: 15 * time.Second}, 10, 1200*time.Millisecond),
		harness.PauseSlowBroker(harness.Size{Events: 3000, Over: 10 * time.Second}, 1, 4*time.Second),
		harness.SlowBrokerSameID(harness.Size{Events: 4000, Over: 14 * time.Second}, 6*time.Second, 2*time.Second),
		harness.Partition(harness.Size{Events: 3000, Over: 16 * time.Second}, 2),
		harness.Admin(harness.Size{Events: 3000, Over: 12 * time.Second}, 12),
		harness.DBCrash(harness.Size{Events: 3000, Over: 15 * time.Second}, 3, 4*time.Second),
		harness.LeaderElection(harness.Size{Events: 4000, Over: 16 * time.Second}, 3, 5*time.Second, 1500*time.Millisecond),
		harness.Mixed(harness.Size{Events: 5000, Over: 20 * time.Second}),
		harness.LargePayloads(harness.Size{Events: 8000, Over: 25 * time.Second}, 10, 3),
		harness.StoreOutageLarge(harness.Size{Events: 4000, Over: 24 * time.Second}, 15*time.Second),
	}
}

// mariaDBPlans are the scenarios of -db mariadb: every fault of the
// polling relay's that applies on MySQL/MariaDB, each scenario in a
// database of its own on the suite's mariadbd: the operators' (admin-ops,
// and mixed's) with outbox dead and replay on a mysql:// URL;
// db-connection-loss finding the relays' connections by their account
// (MySQL has no application_name) and KILLing them; the inbox's consumer
// recording its effects through the inbox's MySQL dialect. Left out:
//   - -mode wal: the WAL relay reads PostgreSQL's write-ahead log;
//   - the scale scenarios but dead-prune (-scale), the tenants'
//     (--schemas) and partitioned outboxes: a relay group and partitions
//     do not run on MySQL yet.
func mariaDBPlans(soak bool) []harness.Plan { return plans(soak, "") }

// mariaDBScales are the scale scenarios of -db mariadb -scale: those whose
// setup and checks have MySQL's SQL. The others need a relay group
// (tenants), the WAL relay, or PostgreSQL's SQL in their setup.
func mariaDBScales() []harness.Scale {
	return []harness.Scale{harness.DeadPrune(1_000_000, 2000, 3*time.Minute, time.Minute)}
}

// scalePlans are the scale scenarios (see harness.Scale): the crash
// suite's machinery for the two that are fault runs, and their own for the
// rest.
func scalePlans() ([]harness.Plan, []harness.Scale) {
	return []harness.Plan{
			harness.LongOutage(harness.Size{Events: 100_000, Over: 17 * time.Minute}, 15*time.Minute, 10*time.Second),
			harness.AsyncCrash(harness.Size{Events: 20_000, Over: time.Minute}, 6, 8*time.Second),
			harness.StoreOutageLarge(harness.Size{Events: 20_000, Over: 150 * time.Second}, 2*time.Minute),
		}, []harness.Scale{
			harness.BackoffAggregates(50_000, 10_000, time.Minute),
			harness.DeadPrune(1_000_000, 2000, 3*time.Minute, time.Minute),
			harness.BigBacklog(100_000, 10_000_000, 1, 0.9),
			harness.WALBigTransaction(1_000_000, 1024, 512),
			harness.WALDBA(),
			harness.TenantFairness(100, 1_000_000, 10, 2*time.Minute, time.Second),
			harness.TenantLocks(200, 15, 2, 0, 100*time.Second, 15*time.Second, time.Minute, time.Second),
		}
}

// walPlans are the WAL relay's scenarios: the faults a streaming relay
// meets, and writers that lock nothing.
func walPlans() []harness.Plan {
	return []harness.Plan{
		harness.WAL(harness.Crash(harness.Size{Events: 4000, Over: 15 * time.Second}, 6)),
		harness.WAL(harness.SameIDRestart(harness.Size{Events: 3000, Over: 10 * time.Second}, 6, 1200*time.Millisecond)),
		harness.WAL(harness.BrokerOutage(harness.Size{Events: 3000, Over: 16 * time.Second}, 6*time.Second)),
		harness.WAL(harness.SlowBrokerSameID(harness.Size{Events: 3000, Over: 12 * time.Second}, 5*time.Second, 2*time.Second)),
		harness.WAL(harness.Partition(harness.Size{Events: 2000, Over: 14 * time.Second}, 2)),
		harness.WAL(harness.DBCrash(harness.Size{Events: 2000, Over: 12 * time.Second}, 2, 4*time.Second)),
		harness.CommitOrderNoLocks(harness.Size{Events: 2000, Over: 10 * time.Second}),
		harness.TwoDatabases(harness.Size{Events: 2000, Over: 12 * time.Second}, 6),
	}
}

func run(ctx context.Context, dbURL string, cluster testkit.Cluster, mysqld *testkit.MySQLd, kafka []string, seed uint64, plans []harness.Plan, scales []harness.Scale, only string, keep bool) error {
	dir, err := os.MkdirTemp("", "txoutbox-chaos-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	bin, err := harness.Build(ctx, dir)
	if err != nil {
		return err
	}
	if mysqld != nil {
		// Every MariaDB scenario runs on the suite's own server, taken
		// for the run: two of them crash it.
		unlock, err := mysqld.Lock(ctx)
		if err != nil {
			return err
		}
		defer unlock()
		if _, err := mysqld.Ensure(ctx); err != nil {
			return fmt.Errorf("-db mariadb needs a server of its own: %w", err)
		}
	}
	serverDB := ""
	if mysqld == nil {
		if serverDB, err = testkit.EnsureDatabase(ctx, dbURL, database); err != nil {
			return err
		}
	}
	var clusterDB string // the chaos cluster's database, set up on first use
	var (
		total  harness.Result
		failed []string
		ran    int
	)
	for i, plan := range plans {
		if only != "" && !strings.Contains(plan.Name, only) {
			continue
		}
		ran++
		db, own := serverDB, (*testkit.Cluster)(nil)
		unlock := func() {}
		if plan.OwnCluster && mysqld == nil {
			// Another process (a test run) may be crashing the cluster.
			if unlock, err = cluster.Lock(ctx); err != nil {
				return err
			}
			if clusterDB == "" {
				u, err := cluster.Ensure(ctx)
				if err != nil {
					return fmt.Errorf("%s needs a PostgreSQL cluster of its own: %w", plan.Name, err)
				}
				if clusterDB, err = testkit.EnsureDatabase(ctx, u, database); err != nil {
					return err
				}
			}
			db, own = clusterDB, &cluster
		}
		res, err := runOne(ctx, db, own, mysqld, kafka, bin, dir, seed+uint64(i), plan, keep)
		unlock()
		if err == nil {
			err = res.Check()
		}
		if err != nil {
			fmt.Printf("%s: FAILED (seed %d): %v\n", plan.Name, seed+uint64(i), err)
			failed = append(failed, plan.Name)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		fmt.Printf("%s: %s\n", plan.Name, res.Line())
		total = total.Add(res)
	}
	for _, sc := range scales {
		if only != "" && !strings.Contains(sc.Name, only) {
			continue
		}
		ran++
		line, err := runScale(ctx, serverDB, mysqld, kafka, bin, dir, seed, sc, keep)
		if err != nil {
			fmt.Printf("scale: %s FAILED: %v %s\n", sc.Name, err, line)
			failed = append(failed, sc.Name)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		fmt.Printf("scale: %s %s\n", sc.Name, line)
	}
	if ran == 0 {
		return fmt.Errorf("no scenario matches -run %q", only)
	}
	if len(plans) > 0 {
		total.Mode = plans[0].Flags.Mode
	}
	if len(scales) > 0 {
		total.Mode = "" // the scale plans are the polling relay's
	}
	if kafka != nil {
		total.Broker = harness.BrokerKafka
	}
	fmt.Println(total.Line())
	if len(failed) > 0 {
		return fmt.Errorf("failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// runScale runs a scale scenario in a fresh schema and scenario directory,
// or with mysqld in a fresh database on it.
func runScale(ctx context.Context, serverDB string, mysqld *testkit.MySQLd, kafka []string, bin harness.Binaries, dir string, seed uint64, sc harness.Scale, keep bool) (line string, err error) {
	env := &harness.Env{Bin: bin, Seed: seed, MySQLd: mysqld, Kafka: kafka}
	err = inScenario(ctx, serverDB, dir, "scale_", sc.Name, keep, env, func() error {
		start := time.Now()
		var err error
		line, err = sc.Run(ctx, env)
		line += fmt.Sprintf(" took_s=%.0f", time.Since(start).Seconds())
		return err
	})
	return line, err
}

// runOne runs plan in a fresh schema and scenario directory, or with
// mysqld in a fresh database on it.
func runOne(ctx context.Context, serverDB string, cluster *testkit.Cluster, mysqld *testkit.MySQLd, kafka []string, bin harness.Binaries, dir string, seed uint64, plan harness.Plan, keep bool) (res harness.Result, err error) {
	env := &harness.Env{Bin: bin, Seed: seed, Cluster: cluster, MySQLd: mysqld, Kafka: kafka}
	err = inScenario(ctx, serverDB, dir, "chaos_", plan.Name, keep, env, func() error {
		var err error
		res, err = harness.Run(ctx, env, plan)
		return err
	})
	return res, err
}

// inScenario completes env with a fresh schema (prefix and name) and a
// scenario directory under dir, for the scenario's logs, and calls run. The
// schema is dropped after a success unless keep; with keep, a failure
// says where the logs are.
func inScenario(ctx context.Context, serverDB, dir, prefix, name string, keep bool, env *harness.Env, run func() error) (err error) {
	if env.MySQLd != nil {
		db, drop, err := testkit.CreateMySQLDatabase(ctx, env.MySQLd.URL(), testkit.SchemaName(prefix+name), true)
		if err != nil {
			return err
		}
		defer func() {
			if err == nil && !keep {
				dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_ = drop(dctx)
			} else {
				db.SQL.Close()
			}
		}()
		env.DB = *db
		return inDir(dir, name, keep, env, run)
	}
	db, err := testkit.CreateSchema(ctx, serverDB, testkit.SchemaName(prefix+name), true)
	if err != nil {
		return err
	}
	defer func() {
		if err == nil && !keep {
			_ = db.Drop(context.Background())
		} else {
			db.SQL.Close()
		}
	}()
	env.DB = harness.DB{SQL: db.SQL, URL: db.URL, Schema: db.Name}
	return inDir(dir, name, keep, env, run)
}

// inDir makes the scenario directory under dir, for the scenario's logs,
// and calls run.
func inDir(dir, name string, keep bool, env *harness.Env, run func() error) (err error) {
	if env.Dir, err = os.MkdirTemp(dir, name+"-"); err != nil {
		return err
	}
	env.Logf = func(format string, args ...any) {
		fmt.Printf("  %s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	if err = run(); err != nil && keep {
		err = fmt.Errorf("%w (logs in %s)", err, env.Dir)
	}
	return err
}
