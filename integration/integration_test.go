package integration_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/integration/internal/harness"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay/walrelay"
)

var (
	soak     = flag.Bool("soak", os.Getenv("CHAOS_SOAK") != "", "run the crash scenario with at least 1,000,000 events (also: CHAOS_SOAK=1)")
	seedFlag = flag.Uint64("seed", 0, "random seed of the scenarios (default: CHAOS_SEED, else the clock)")
)

var (
	bin      harness.Binaries
	totalMu  sync.Mutex
	total    harness.Result
	scenario int
)

// Lanes of scenarios run at the same time, each one scenario after another
// per slot: two slots on the shared server (each scenario has a schema and
// a kfake broker of its own), one on a PostgreSQL cluster of their own
// (the ones that crash it, and a few more to even the lanes' lengths), and
// one on the real Kafka cluster, whose scenarios spend most of their time
// waiting for its nodes to stop, start and elect leaders. Every test is
// parallel and waits for its lane, so the suite fits its time budget on
// two cores without two scenarios fighting over one cluster or one broker;
// most of a scenario's time is waiting on its faults, not CPU.
var (
	sharedLane  = make(slots, 2)
	clusterLane = make(slots, 1)
	kafkaLane   = make(slots, 1)
	// alone is held shared by every scenario in its lane and exclusively
	// by one that compares two throughputs (Scale.Alone): a scenario in
	// the other lane would slow one measurement and not the other.
	alone sync.RWMutex
)

// slots is a lane: up to cap(s) scenarios in it run at once.
type slots chan struct{}

func (s slots) Lock()   { s <- struct{}{} }
func (s slots) Unlock() { <-s }

// enterAlone holds alone exclusively for a scenario that runs alone, and
// shared for any other; the function it returns lets go.
func enterAlone(exclusive bool) (release func()) {
	if exclusive {
		alone.Lock()
		return alone.Unlock
	}
	alone.RLock()
	return alone.RUnlock
}

// enterLane starts a long scenario test: parallel, once it has a slot in
// lane and its hold on alone (see enterAlone). The function it returns
// lets both go.
func enterLane(t *testing.T, what string, lane slots, exclusive bool) (leave func()) {
	t.Helper()
	testkit.Long(t, what)
	t.Parallel()
	lane.Lock()
	release := enterAlone(exclusive)
	return func() {
		release()
		lane.Unlock()
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	// A test waiting for its lane holds one of -parallel's slots; unless
	// told otherwise, allow enough that a lane is never starved by tests
	// queued on the other. The lanes bound the real concurrency.
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "64")
	}
	if testing.Short() {
		// Every test here is a long scenario (testkit.Long skips each):
		// building the binaries would be the loop's slowest step.
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "txoutbox-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	bin, err = harness.Build(ctx, dir)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if scenario > 0 {
		fmt.Printf("%d scenarios: %s\n", scenario, total.Line())
	}
	os.Exit(code)
}

func seed() uint64 {
	if *seedFlag != 0 {
		return *seedFlag
	}
	if s, err := strconv.ParseUint(os.Getenv("CHAOS_SEED"), 10, 64); err == nil {
		return s
	}
	return uint64(time.Now().UnixNano())
}

// run runs a scenario on a fresh schema and fails the test on any broken
// promise. A scenario that crashes PostgreSQL gets the chaos cluster
// (created and started if needed), so tests on the shared server are not
// hit.
func run(t *testing.T, plan harness.Plan) harness.Result {
	t.Helper()
	return runOn(t, plan, nil)
}

// runKafka is run with the real Apache Kafka cluster of .ci/services as
// the broker, held exclusively while the scenario kills, pauses and
// partitions its nodes. Every such scenario runs in the Kafka lane: in one
// lane they never wait for each other's hold on the Kafka cluster while
// holding another lane idle.
func runKafka(t *testing.T, plan harness.Plan) harness.Result {
	t.Helper()
	return runOn(t, plan, kafkatest.ClusterBrokers())
}

func runOn(t *testing.T, plan harness.Plan, kafka []string) harness.Result {
	t.Helper()
	lane := sharedLane
	switch {
	case kafka != nil:
		lane = kafkaLane
	case plan.OwnCluster:
		lane = clusterLane
	}
	return runIn(t, plan, kafka, lane)
}

func runIn(t *testing.T, plan harness.Plan, kafka []string, lane slots) harness.Result {
	t.Helper()
	defer enterLane(t, "the crash suite's scenario "+plan.Name, lane, plan.Alone)()
	if kafka != nil {
		unlock, err := kafkatest.LockClusterFile(true)
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
	}
	var (
		db      *testkit.DB
		cluster *testkit.Cluster
	)
	if plan.OwnCluster {
		c := testkit.ChaosCluster
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		unlock, err := c.Lock(ctx) // another process may be crashing it
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		defer unlock()
		url, err := c.Ensure(ctx)
		cancel()
		if err != nil {
			// A missing service is a failure, in CI and elsewhere.
			t.Fatalf("%s needs a PostgreSQL cluster of its own: %v", plan.Name, err)
		}
		db, cluster = testkit.NewOutboxAt(t, url), &c
	} else {
		db = testkit.NewOutbox(t)
	}
	env := &harness.Env{
		DB:      *db,
		Bin:     bin,
		Dir:     t.TempDir(),
		Logf:    t.Logf,
		Seed:    seed(),
		Cluster: cluster,
		Kafka:   kafka,
	}
	return runEnv(t, env, plan)
}

// runEnv runs plan in env, set up by the caller, which holds its lane.
func runEnv(t *testing.T, env *harness.Env, plan harness.Plan) harness.Result {
	t.Helper()
	limit := 4 * time.Minute
	if *soak {
		limit = 3 * time.Hour // run with -timeout 4h
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	res, err := harness.Run(ctx, env, plan)
	if err != nil {
		dumpLogs(t, env.Dir)
		t.Fatalf("%s (seed %d): %v", plan.Name, env.Seed, err)
	}
	if err := res.Check(); err != nil {
		dumpLogs(t, env.Dir)
		t.Fatalf("seed %d: %v", env.Seed, err)
	}
	totalMu.Lock()
	total = total.Add(res)
	scenario++
	totalMu.Unlock()
	t.Log(res.Line())
	return res
}

// dumpLogs prints the tail of every child process log of a failed scenario.
func dumpLogs(t *testing.T, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil || len(b) == 0 {
			continue
		}
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		t.Logf("--- %s (tail) ---\n%s", e.Name(), b)
	}
}

func TestCrash(t *testing.T) {
	size := harness.Size{Events: 8000, Over: 25 * time.Second}
	if *soak {
		size = harness.Size{Events: 1_000_000, Over: 0}
	}
	res := run(t, onCluster(harness.Crash(size, 10)))
	if res.Crashes < 10 {
		t.Fatalf("only %d crashes, want at least 10", res.Crashes)
	}
}

// TestLargePayloads is the crash scenario with the claim check on, at the
// size CI affords (`go run ./integration/chaos -run large-payloads` runs it
// larger): relays killed right after an upload and at random, orphans
// counted and pruned. Its check waits for the orphans to pass the store's
// shortest retention, a minute.
func TestLargePayloads(t *testing.T) {
	res := run(t, harness.LargePayloads(harness.Size{Events: 3000, Over: 12 * time.Second}, 6, 2))
	if res.UploadKills == 0 || res.Pruned < 2 {
		t.Fatalf("%d kills after an upload and %d objects pruned, want some and at least the 2 orphans", res.UploadKills, res.Pruned)
	}
}

// TestStoreOutageLarge takes the claim check's store away for 15 s under
// the writers; -soak (CHAOS_SOAK=1) and `go run ./integration/chaos -scale
// -run store-outage` for the full two minutes.
func TestStoreOutageLarge(t *testing.T) {
	size, outage := harness.Size{Events: 3000, Over: 20 * time.Second}, 15*time.Second
	if *soak {
		size, outage = harness.Size{Events: 20_000, Over: 150 * time.Second}, 2*time.Minute
	}
	res := run(t, harness.StoreOutageLarge(size, outage))
	if res.StoreOutages != 1 || res.Dead != 0 {
		t.Fatalf("%d store outages and %d dead, want 1 and 0", res.StoreOutages, res.Dead)
	}
}

func TestCommitOrderGap(t *testing.T) {
	res := run(t, harness.CommitGap(harness.Size{Events: 2500, Over: 12 * time.Second}))
	if res.Dead != 0 {
		t.Fatalf("dead=%d, want 0", res.Dead)
	}
}

// TestDelayedUnderKills: events delivered not before a time hold their
// aggregates' later events back while relays are killed; none is early,
// lost or out of order (the scenario's own check: some were held).
func TestDelayedUnderKills(t *testing.T) {
	res := run(t, harness.Delayed(harness.Size{Events: 3000, Over: 12 * time.Second}, 4, 3*time.Second))
	if res.Crashes < 4 {
		t.Fatalf("only %d crashes, want at least 4", res.Crashes)
	}
}

func TestBrokerOutage(t *testing.T) {
	res := run(t, onCluster(harness.BrokerOutage(harness.Size{Events: 4000, Over: 24 * time.Second}, 10*time.Second)))
	if res.Dead != 0 {
		t.Fatalf("dead=%d, want 0", res.Dead)
	}
}

func TestDBConnectionLoss(t *testing.T) {
	res := run(t, harness.DBConnLoss(harness.Size{Events: 3000, Over: 12 * time.Second}, 5))
	if res.Dead != 0 {
		t.Fatalf("dead=%d, want 0", res.Dead)
	}
}

func TestPoison(t *testing.T) {
	const perKind = 3
	res := run(t, harness.Poison(harness.Size{Events: 2000, Over: 10 * time.Second}, perKind))
	if res.Dead != 3*perKind {
		t.Fatalf("dead=%d, want %d (the poison events only)", res.Dead, 3*perKind)
	}
}

func TestRebalance(t *testing.T) {
	res := run(t, harness.Rebalance(harness.Size{Events: 4000, Over: 20 * time.Second}, 8))
	if res.Dead != 0 {
		t.Fatalf("dead=%d, want 0", res.Dead)
	}
}

// TestCrashInbox is the crash scenario with the consumer switched to the
// inbox: every effect exactly once despite the relays' duplicates and two
// consumers reading everything at once.
func TestCrashInbox(t *testing.T) {
	run(t, harness.WithInbox(harness.Crash(harness.Size{Events: 2500, Over: 8 * time.Second}, 3)))
}

// TestSameIDRestart restarts fixed-id relays under their own id every
// ~1.2 s (bound: one window per restart).
func TestSameIDRestart(t *testing.T) {
	res := run(t, harness.SameIDRestart(harness.Size{Events: 5000, Over: 15 * time.Second}, 10, 1200*time.Millisecond))
	if res.SameIDRestarts < 10 {
		t.Fatalf("only %d same-id restarts, want at least 10", res.SameIDRestarts)
	}
}

// TestPauseSlowBroker pauses a relay past StaleAfter and its lease while
// the broker holds produce requests past the lease.
func TestPauseSlowBroker(t *testing.T) {
	res := run(t, harness.PauseSlowBroker(harness.Size{Events: 3000, Over: 10 * time.Second}, 1, 4*time.Second))
	if res.Pauses < 1 || res.SlowBroker < 1 {
		t.Fatalf("pauses=%d slow-broker holds=%d, want at least 1 each", res.Pauses, res.SlowBroker)
	}
}

// TestSlowBrokerSameID is the reported repro, compressed: produce held past
// the lease in 1 s windows while fixed-id relays restart under their id.
func TestSlowBrokerSameID(t *testing.T) {
	res := run(t, harness.SlowBrokerSameID(harness.Size{Events: 4000, Over: 14 * time.Second}, 6*time.Second, 2*time.Second))
	if res.SameIDRestarts < 2 || res.SlowBroker < 1 {
		t.Fatalf("same_id_restarts=%d slow-broker holds=%d, want at least 2 and 1", res.SameIDRestarts, res.SlowBroker)
	}
}

// TestPartition freezes one relay's database connections, then every
// relay's broker connections, for 5-12 s each, then drops or thaws them.
func TestPartition(t *testing.T) {
	res := run(t, harness.Partition(harness.Size{Events: 3000, Over: 16 * time.Second}, 2))
	if res.Partitions < 2 {
		t.Fatalf("only %d partitions, want at least 2", res.Partitions)
	}
}

// TestAdminOps runs the outbox CLI (retry, drop, replay and dry runs) as
// separate processes under load, with poison events to work on.
func TestAdminOps(t *testing.T) {
	run(t, harness.Admin(harness.Size{Events: 3000, Over: 12 * time.Second}, 12))
}

// TestDBCrash crashes PostgreSQL (the chaos cluster, port 5439) under load.
func TestDBCrash(t *testing.T) {
	run(t, harness.DBCrash(harness.Size{Events: 3000, Over: 15 * time.Second}, 3, 4*time.Second))
}

// TestMixed runs every fault at once; with -soak over 1,000,000 events.
func TestMixed(t *testing.T) {
	size := harness.Size{Events: 5000, Over: 20 * time.Second}
	if *soak {
		size = harness.Size{Events: 1_000_000}
	}
	run(t, harness.Mixed(size))
}

// The WAL relay's scenarios (outbox relay --mode wal: one relay streams the
// slot, two stand by), judged by commit order; sizes as
// `go run ./integration/chaos -mode wal`.

// onCluster runs a scenario that does not crash PostgreSQL on the chaos
// cluster anyway: scenarios run one per lane, and the shared server's lane
// would hold most of them; this evens the lanes' lengths (the CI budget).
func onCluster(p harness.Plan) harness.Plan {
	p.OwnCluster = true
	return p
}

func TestCrashWAL(t *testing.T) {
	res := run(t, harness.WAL(harness.Crash(harness.Size{Events: 4000, Over: 15 * time.Second}, 6)))
	if res.Crashes < 6 {
		t.Fatalf("only %d crashes, want at least 6", res.Crashes)
	}
}

func TestSameIDRestartWAL(t *testing.T) {
	res := run(t, onCluster(harness.WAL(harness.SameIDRestart(harness.Size{Events: 3000, Over: 10 * time.Second}, 6, 1200*time.Millisecond))))
	if res.SameIDRestarts < 6 {
		t.Fatalf("only %d same-id restarts, want at least 6", res.SameIDRestarts)
	}
}

func TestBrokerOutageWAL(t *testing.T) {
	run(t, onCluster(harness.WAL(harness.BrokerOutage(harness.Size{Events: 3000, Over: 16 * time.Second}, 6*time.Second))))
}

func TestSlowBrokerSameIDWAL(t *testing.T) {
	res := run(t, onCluster(harness.WAL(harness.SlowBrokerSameID(harness.Size{Events: 3000, Over: 12 * time.Second}, 5*time.Second, 2*time.Second))))
	if res.SlowBroker < 1 {
		t.Fatalf("slow-broker holds=%d, want at least 1", res.SlowBroker)
	}
}

func TestPartitionWAL(t *testing.T) {
	res := run(t, onCluster(harness.WAL(harness.Partition(harness.Size{Events: 2000, Over: 14 * time.Second}, 2))))
	if res.Partitions < 2 {
		t.Fatalf("only %d partitions, want at least 2", res.Partitions)
	}
}

func TestDBCrashWAL(t *testing.T) {
	run(t, harness.WAL(harness.DBCrash(harness.Size{Events: 2000, Over: 12 * time.Second}, 2, 4*time.Second)))
}

// TestCommitOrderNoLocksWAL writes shared aggregates from concurrent
// transactions that lock nothing: first deliveries must follow commit
// order.
func TestCommitOrderNoLocksWAL(t *testing.T) {
	run(t, harness.CommitOrderNoLocks(harness.Size{Events: 2000, Over: 10 * time.Second}))
}

// TestTwoDatabasesWAL: two databases on one server, an outbox of one
// schema and table name in each with WAL relays and writers, operators
// running `outbox wal takeover --force` against one: 0 lost, 0 reordered
// in both.
func TestTwoDatabasesWAL(t *testing.T) {
	res := run(t, harness.TwoDatabases(harness.Size{Events: 2000, Over: 12 * time.Second}, 6))
	if res.AdminOps < 6 {
		t.Fatalf("only %d takeovers run, want at least 6", res.AdminOps)
	}
}

// TestWALStandbyTakesOverAfterSIGKILL: two WAL relays on one slot; the
// streaming one is SIGKILLed three times, and a standby must stream within
// 3 s each time (its StandbyRetry is 200 ms: the killed process's
// connection closes at once and frees the slot).
func TestWALStandbyTakesOverAfterSIGKILL(t *testing.T) {
	defer enterLane(t, "three SIGKILLs of the streaming WAL relay", sharedLane, false)()
	db := testkit.NewOutbox(t)
	env := &harness.Env{DB: *db, Bin: bin, Dir: t.TempDir(), Logf: t.Logf, Seed: seed()}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	took, err := harness.WALTakeover(ctx, env, 3)
	if err != nil {
		dumpLogs(t, env.Dir)
		t.Fatal(err)
	}
	for i, d := range took {
		if d > 3*time.Second {
			t.Errorf("kill %d: the standby streamed after %s, want within 3s", i, d)
		}
	}
}

// TestWALSlotLost: a slot whose WAL PostgreSQL removed (past
// max_slot_wal_keep_size) makes the WAL relay stop with ErrSlotLost, never
// start over at the current position; `outbox wal takeover` then leaves
// every unpublished row to the polling relay. On the chaos cluster (the
// setting is the server's), in its lane.
func TestWALSlotLost(t *testing.T) {
	defer enterLane(t, "a WAL slot lost on the chaos cluster", clusterLane, false)()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := testkit.ChaosCluster
	unlock, err := c.Lock(ctx) // another process may be crashing it
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	url, err := c.Ensure(ctx)
	if err != nil {
		t.Fatalf("needs the chaos cluster: %v", err)
	}
	db := testkit.NewOutboxAt(t, url)
	exec := func(q string) {
		t.Helper()
		if _, err := db.SQL.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	cfg := walrelay.Config{Table: db.Table(), StandbyRetry: 100 * time.Millisecond}
	t.Cleanup(func() {
		_, _ = db.SQL.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`,
			walrelay.SlotDefault(db.Database(), db.Table()))
		_, _ = db.SQL.Exec(`DROP PUBLICATION IF EXISTS ` + walrelay.PublicationDefault(db.Database(), db.Table()))
	})
	r, err := walrelay.New(db.URL, kafkatest.NopPublisher{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	testkit.WaitFor(t, 20*time.Second, "the relay streams", r.Active)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := txoutbox.NewEvent("orders", "order", "o-1", "order.placed", map[string]int{"n": 1})
	if err := w.Write(ctx, tx, ev); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	exec(`ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`)
	t.Cleanup(func() {
		_, _ = db.SQL.Exec(`ALTER SYSTEM RESET max_slot_wal_keep_size`)
		_, _ = db.SQL.Exec(`SELECT pg_reload_conf()`)
	})
	exec(`SELECT pg_reload_conf()`)
	exec(`CREATE TABLE wal_filler (n int)`)
	var status string
	testkit.WaitFor(t, 60*time.Second, "the slot lost", func() bool {
		for range 3 {
			exec(`INSERT INTO wal_filler VALUES (1)`)
			exec(`SELECT pg_switch_wal()`)
		}
		exec(`CHECKPOINT`)
		err := db.SQL.QueryRowContext(ctx, `SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1`, r.Slot()).Scan(&status)
		return err == nil && status == "lost"
	})

	if err := r.Run(ctx); !errors.Is(err, walrelay.ErrSlotLost) {
		t.Fatalf("Run on a lost slot: %v, want ErrSlotLost", err)
	}
	res, err := walrelay.Takeover(ctx, db.URL, walrelay.TakeoverConfig{Table: db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	var pending int
	if err := db.SQL.QueryRowContext(ctx, `SELECT count(*) FROM outbox WHERE state = 'pending' AND event_id = $1`, ev.ID.String()).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if !res.Lost || res.Confirmed != 0 || pending != 1 {
		t.Fatalf("takeover of a lost slot: %+v, the unconfirmed event pending: %v; want Lost and nothing marked", res, pending == 1)
	}
}

// The faults only a real, replicated cluster has, on the 3-node Apache
// Kafka cluster of .ci/services; sizes as `go run ./integration/chaos
// -broker kafka`. Nothing may go dead in any of them but the poison
// scenario's own poison events.

func TestLeaderElectionKafka(t *testing.T) {
	res := runKafka(t, harness.LeaderElection(harness.Size{Events: 4000, Over: 16 * time.Second}, 3, 5*time.Second, 1500*time.Millisecond))
	if res.LeaderKills < 3 || res.SameIDRestarts < 2 {
		t.Fatalf("%d leader kills and %d same-id restarts, want at least 3 and 2", res.LeaderKills, res.SameIDRestarts)
	}
}

func TestBrokerOutageKafka(t *testing.T) {
	runKafka(t, harness.BrokerOutage(harness.Size{Events: 4000, Over: 24 * time.Second}, 10*time.Second))
}

func TestPauseSlowBrokerKafka(t *testing.T) {
	res := runKafka(t, harness.PauseSlowBroker(harness.Size{Events: 3000, Over: 10 * time.Second}, 1, 4*time.Second))
	if res.SlowBroker < 1 {
		t.Fatal("no node was paused while publishes waited on it")
	}
}

func TestPartitionKafka(t *testing.T) {
	res := runKafka(t, harness.Partition(harness.Size{Events: 3000, Over: 16 * time.Second}, 2))
	if res.Partitions < 2 {
		t.Fatalf("%d partitions, want at least 2", res.Partitions)
	}
}

// TestPoisonKafka bounds its duplicates by 0, so it runs with the relay's
// default lease (NoRelayFaultFlags): with the suite's 10 s lease, the real
// cluster's publishes beside other scenarios can outlast it, and the
// relay's own new claim of rows still being published sends them twice, as
// documented for a publish slower than LeaseDuration. It also runs alone,
// though with the default lease it need not.
func TestPoisonKafka(t *testing.T) {
	p := harness.Poison(harness.Size{Events: 2000, Over: 10 * time.Second}, 3)
	p.Alone = true
	runKafka(t, p)
}

// The scale scenarios at the sizes CI can afford (`go run
// ./integration/chaos -scale` runs them at full size): what each checks
// holds at any size, and the plan-work tests in internal/outboxsql prove
// the statements' cost does not grow with it.

// runScale runs sc in a fresh schema on the shared lane.
func runScale(t *testing.T, sc harness.Scale) string {
	t.Helper()
	return runScaleOn(t, testkit.Postgres, sc)
}

// runScaleOn is runScale on engine e: on MySQL in a database of its own
// on the MariaDB of .ci/services.
func runScaleOn(t *testing.T, e testkit.Engine, sc harness.Scale) string {
	t.Helper()
	defer enterLane(t, "the scale scenario "+sc.Name, sharedLane, sc.Alone)()
	db := testkit.NewOutboxOn(t, e)
	env := &harness.Env{DB: *db, Bin: bin, Dir: t.TempDir(), Logf: t.Logf, Seed: seed()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	line, err := sc.Run(ctx, env)
	if err != nil {
		dumpLogs(t, env.Dir)
		t.Fatalf("%s: %v (%s)", sc.Name, err, line)
	}
	t.Logf("scale: %s %s", sc.Name, line)
	return line
}

func TestScaleBackoffAggregates(t *testing.T) {
	runScale(t, harness.BackoffAggregates(5000, 1000, 10*time.Second))
}

// TestScaleDeadPrune: retention keeps the table its size on both
// databases (full size: 1,000,000 dead rows, 2,000 events a second for 3
// minutes, `go run ./integration/chaos -scale -run dead-prune`, with `-db
// mariadb` on MariaDB).
func TestScaleDeadPrune(t *testing.T) {
	testkit.Long(t, "the scale scenario dead-prune")
	for _, e := range testkit.Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			runScaleOn(t, e, harness.DeadPrune(50_000, 500, 40*time.Second, 10*time.Second))
		})
	}
}

// TestScaleBigBacklog drains 10,000 and 100,000 rows with 3 relays and
// checks each drain whole; it reports their rates' ratio but does not
// judge it. In CI another test package runs beside this one (go test -p
// 2), and a drain of one second and one of ten see its load differently:
// the ratio fell to 0.73 there with the relays' code unchanged. The bound
// (0.9) is judged at full size (go run ./integration/chaos -scale); at
// CI's size the claim's plan work is
// (integration/dbtests/outboxsql.TestClaimCostIsItsBatchWithAnyPendingBacklog).
func TestScaleBigBacklog(t *testing.T) {
	runScale(t, harness.BigBacklog(10_000, 100_000, 3, 0))
}

func TestScaleWALBigTransaction(t *testing.T) {
	runScale(t, harness.WALBigTransaction(50_000, 1024, 256))
}

func TestScaleWALDBA(t *testing.T) {
	runScale(t, harness.WALDBA())
}

// TestScaleTenantFairness: one relay for 10 tenants' outboxes, one of them
// with a backlog, the others writing 10 events a second each for 15 s
// beside it: theirs go out within a second at p99 (full size: 100
// tenants, 1,000,000 rows, 2 minutes). The backlog is sized to outlast
// the window, or nothing would be measured beside it.
func TestScaleTenantFairness(t *testing.T) {
	runScale(t, harness.TenantFairness(10, 300_000, 10, 15*time.Second, time.Second))
}

// TestScaleTenantLocks: one relay for 20 tenants' outboxes, 3 of them
// held ACCESS EXCLUSIVE by another session for 10 s while every tenant
// writes 5 events a second: the others' go out within a second at p99,
// the locked ones are reported (the relay's log, outbox status) and drain
// once the locks go (full size: 200 tenants, 15 locked for a minute, at
// the default --max-conns of 40). Its pool of 16 is what 15 locked tables
// of 200 leave the others of 40.
func TestScaleTenantLocks(t *testing.T) {
	runScale(t, harness.TenantLocks(20, 3, 5, 16, 20*time.Second, 5*time.Second, 10*time.Second, time.Second))
}

func TestAsyncCrash(t *testing.T) {
	run(t, harness.AsyncCrash(harness.Size{Events: 3000, Over: 15 * time.Second}, 3, 4*time.Second))
}
