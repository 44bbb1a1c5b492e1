package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay/walrelay"
)

// testEnv is an env on the test server's bench database and an in-process
// broker, with opts and the producer's defaults.
func testEnv(ctx context.Context, t *testing.T, opts options) *env {
	t.Helper()
	return testEnvOn(ctx, t, testkit.Postgres, opts)
}

// testEnvOn is testEnv on engine eng: on MySQL, the test server of
// testkit.MySQLURL, on which each scenario makes a database of its own
// (-db mariadb).
func testEnvOn(ctx context.Context, t *testing.T, eng testkit.Engine, opts options) *env {
	t.Helper()
	e := &env{opts: opts}
	if eng.Dialect == txoutbox.MySQL {
		e.dbURL, e.mysql, e.opts.db = testkit.MySQLURL(t), true, dbMariaDB
	} else {
		var err error
		if e.dbURL, err = testkit.EnsureDatabase(ctx, testkit.ServerURL(), benchDatabase); err != nil {
			t.Fatal(err)
		}
	}
	c := kafkatest.New(t)
	e.brokers, e.brokerPids = c.ListenAddrs(), []int{os.Getpid()}
	e.opts.timeout, e.opts.maxOpenRequests, e.opts.idempotent = time.Minute, 1, true
	return e
}

// TestPlainDrains runs the plain loop on a small backlog against the test
// server and an in-process broker, on each database: every event arrives
// once, in per-key order, and the drain's cost figures are read.
func TestPlainDrains(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, testPlainDrains)
}

func testPlainDrains(t *testing.T, eng testkit.Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := testEnvOn(ctx, t, eng, options{events: 2500, aggregates: 40})
	if err := e.findServer(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := runPlain(ctx, e, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Scenario != "plain" || r.Events != 2500 || r.EPS <= 0 {
		t.Errorf("result %+v", r)
	}
	if r.delivery == nil || r.Records != 2500 || r.Missing != 0 || r.Duplicates != 0 || r.OrderViolations != 0 {
		t.Fatalf("delivery %+v, want 2500 records, none missing, duplicated or out of order", r.delivery)
	}
	if r.Cost == nil || r.Cost.RelayUS == nil || *r.Cost.RelayUS <= 0 {
		t.Fatalf("cost %+v: no CPU of this process", r.Cost)
	}
	if e.mysql {
		checkMySQLdCost(t, e, r.Cost)
		return
	}
	if r.Cost.WALBytes == nil || *r.Cost.WALBytes < 50 {
		t.Errorf("WAL per event %v, want at least 50 bytes (two updates of each row)", r.Cost.WALBytes)
	}
	t.Logf("%.0f events/s, cost: relay %.1f µs, pg %.1f µs, wal %.0f B per event", r.EPS, *r.Cost.RelayUS, deref(r.Cost.PGUS), *r.Cost.WALBytes)
	// The test server runs on this host in development and in CI.
	if e.postmaster == 0 {
		t.Fatal("the test server's postmaster was not found among this host's processes")
	}
	if r.Cost.PGUS == nil || *r.Cost.PGUS <= 0 || r.Cost.TotalUS == nil || *r.Cost.TotalUS < *r.Cost.PGUS+*r.Cost.RelayUS {
		t.Errorf("cost %+v: want PostgreSQL CPU and a total of the three", r.Cost)
	}
}

// checkMySQLdCost checks a MySQL drain's cost: mysqld's CPU, in the total,
// and its counters, the two updates of every row among them. The test
// server runs on this host in development and in CI.
func checkMySQLdCost(t *testing.T, e *env, c *cost) {
	t.Helper()
	if e.mysqld == 0 {
		t.Fatal("the test server's mysqld was not found among this host's processes")
	}
	if c.MySQLdUS == nil || *c.MySQLdUS <= 0 || c.TotalUS == nil || *c.TotalUS < *c.MySQLdUS+*c.RelayUS || c.PGUS != nil || c.WALBytes != nil {
		t.Errorf("cost %+v: want mysqld's CPU and a total of the three, nothing of PostgreSQL's", c)
	}
	// Other sessions on the server add to the counters, never take away.
	if got := c.MySQLdStatus["handler_update"]; got < 2 {
		t.Errorf("mysqld's row updates per event %v (counters %v), want at least 2: each row claimed and marked", got, c.MySQLdStatus)
	}
	t.Logf("cost: relay %.1f µs, mysqld %.1f µs per event; mysqld's counters per event %v", *c.RelayUS, *c.MySQLdUS, c.MySQLdStatus)
}

// checkDrains returns an emit for runRelayRounds that notes each drain as
// scenario and round in order, and checks that it read back its 1500
// events, none missing, duplicated or out of order.
func checkDrains(t *testing.T, order *[]string) func(any) error {
	return func(v any) error {
		r := v.(throughput)
		*order = append(*order, fmt.Sprintf("%s%d", r.Scenario, r.Round))
		if r.delivery == nil || r.Records != 1500 || r.Missing != 0 || r.Duplicates != 0 || r.OrderViolations != 0 {
			t.Errorf("%s round %d: delivery %+v, want 1500 records, none missing, duplicated or out of order", r.Scenario, r.Round, r.delivery)
		}
		return nil
	}
}

// The relay and the plain loop drain in interleaved rounds, each round on
// a topic of its own: the relay first, then the plain loop twice, then the
// relay, and every drain reads back exactly its own events.
func TestRelayRoundsInterleave(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, testRelayRoundsInterleave)
}

func testRelayRoundsInterleave(t *testing.T, eng testkit.Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := testEnvOn(ctx, t, eng, options{events: 1500, aggregates: 30, rounds: 2})
	var order []string
	emit := checkDrains(t, &order)
	relays, plains, scheds, err := runRelayRounds(ctx, e, "", true, emit)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, " "); got != "relay0 plain0 plain1 relay1" || len(relays) != 2 || len(plains) != 2 || len(scheds) != 0 {
		t.Fatalf("drains %q (%d relay, %d plain, %d scheduled), want relay0 plain0 plain1 relay1", got, len(relays), len(plains), len(scheds))
	}
}

// With -scheduled, each relay drain is followed by one beside the
// scheduled rows, which must not be waited for, published or counted.
func TestRelayRoundsBesideScheduledRows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := testEnv(ctx, t, options{events: 1500, aggregates: 30, rounds: 1, scheduled: 5000})
	var order []string
	emit := checkDrains(t, &order)
	_, _, scheds, err := runRelayRounds(ctx, e, "", false, emit)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, " "); got != "relay0 relay_scheduled0" || len(scheds) != 1 || scheds[0].Settings["scheduled"] != 5000 {
		t.Fatalf("drains %q (%d scheduled), want relay0 relay_scheduled0 with 5000 scheduled rows", got, len(scheds))
	}
}

func TestReadProcStat(t *testing.T) {
	t.Parallel()
	st, err := readProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != os.Getppid() {
		t.Errorf("ppid %d, want %d", st.ppid, os.Getppid())
	}
	// Burn a few clock ticks so the reading must move.
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	cpu, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if cpu < 20*time.Millisecond {
		t.Errorf("CPU %s after a 50 ms busy loop, want at least 20 ms", cpu)
	}
	if _, err := readProcStat(-1); err == nil {
		t.Error("readProcStat(-1) succeeded")
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}

// The WAL relay's drain counts its acknowledgements as the polling
// relay's does, stops once every event is acknowledged, and reads back
// exactly the round's events, in order.
func TestWALDrainReadsBackEveryEvent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := testEnv(ctx, t, options{events: 1500, aggregates: 30, rounds: 1})
	if err := e.findPostmaster(ctx); err != nil {
		t.Fatal(err)
	}
	rd := walRound{Round: 7}
	cfg := walrelay.Config{CleanupInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)}
	if err := walStreamDrain(ctx, e, cfg, &rd, &walBench{}, false); err != nil {
		t.Fatal(err)
	}
	if rd.delivery == nil || rd.Records != 1500 || rd.Missing != 0 || rd.Duplicates != 0 || rd.OrderViolations != 0 {
		t.Fatalf("delivery %+v, want 1500 records, none missing, duplicated or out of order", rd.delivery)
	}
	if rd.WALEPS <= 0 || rd.WALCost == nil || rd.WALCost.RelayUS == nil || *rd.WALCost.RelayUS <= 0 {
		t.Fatalf("round %+v: no events/s or no CPU of this process", rd)
	}
}

// The plain loop's claim reads its batch, whatever the table holds: the
// bench compares the relay with it, so a plan that reads every row of the
// table would flatter the relay more the larger the drain.
func TestPlainClaimCostIsItsBatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dbURL, err := testkit.EnsureDatabase(ctx, testkit.ServerURL(), benchDatabase)
	if err != nil {
		t.Fatal(err)
	}
	work := func(rows int) testkit.Work {
		ts, err := testkit.CreateSchema(ctx, dbURL, testkit.SchemaName("plain_claim"), false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ts.Drop(context.Background()) })
		table, err := newPlainTable(ctx, &schemaDB{SQL: ts.SQL, Schema: ts.Name})
		if err != nil {
			t.Fatal(err)
		}
		if err := table.writeBacklog(ctx, rows, 1000); err != nil {
			t.Fatal(err)
		}
		var most testkit.Work
		for mode, w := range testkit.PlanWorkModes(t, ts.SQL, nil, table.render(plainClaimSQL), plainBatch) {
			if w.Rows != plainBatch {
				t.Fatalf("%s: claimed %d rows of %d, want %d", mode, w.Rows, rows, plainBatch)
			}
			if w.Buffers > most.Buffers {
				most = w
			}
		}
		return most
	}
	small, large := work(10_000), work(400_000)
	if large.Buffers > small.Buffers*3/2 {
		t.Errorf("a claim of %d rows read %d buffers in a table of 400,000 rows, %d in one of 10,000: want its batch's work at both sizes",
			plainBatch, large.Buffers, small.Buffers)
	}
	t.Logf("claim of %d: %d buffers at 10,000 rows, %d at 400,000", plainBatch, small.Buffers, large.Buffers)
}
