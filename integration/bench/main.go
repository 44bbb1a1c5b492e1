// Command bench measures txoutbox's relay and write path side by side with
// the alternatives a Go user would otherwise pick, in one run on the same
// PostgreSQL (or MariaDB, -db mariadb) and broker, so the ratios hold on a
// noisy machine.
//
//	go run ./integration/bench                       # the default profile: meant to take under 10 minutes on 2 cores
//	go run ./integration/bench -db mariadb           # the same on MariaDB or MySQL ($MYSQL_URL), the scenarios that apply there
//	go run ./integration/bench -events 50000 -skip memory,claim
//	go run ./integration/bench -profile peers         # the relays against River (kfake)
//	go run ./integration/bench -profile peers -broker kafka # on the real 3-node cluster, with Debezium
//
// -profile names the scenarios a run has and their sizes: default (every
// scenario but river, debezium, prune and large), large (large alone), peers (relay, relay3, plain,
// kafkalimit, wal, river and debezium, at -events 50000 -rounds 4: the
// runs of docs/performance.md's "Against the peers") and all (every
// scenario at the flags' defaults). -skip leaves scenarios of the profile
// out, and a size flag given on the command line overrides the profile's.
//
// With -broker kafka every drain publishes to the Apache Kafka cluster of
// .ci/services (replication factor 3, min.insync.replicas = 2, held
// exclusively for the run), each on a topic made anew, and the broker's
// CPU is its three nodes'; the debezium scenario runs only there.
// It needs PostgreSQL (-database-url, default $DATABASE_URL or the local
// server with trust auth) and the Go toolchain: it builds the kfake broker
// (internal/kfakeproc), which runs in its own OS process on loopback, and the
// outbox CLI, whose relay runs as its own process for the memory scenario.
// Every scenario works in a fresh schema of the database txoutbox_bench,
// dropped afterwards.
//
// It prints one JSON object per scenario on stdout, then the summary line
//
//	bench: relay_eps=… relay3_eps=… naive_eps=… forwarder_eps=… dblimit_eps=… kafkalimit_eps=… ceiling_eps=… relay_vs_naive=… relay_vs_forwarder=… relay_vs_ceiling=… order_violations=… p50_ms=… p99_ms=… gorm_overhead=… ent_overhead=… claim_flatness=… relay_rss_mib=… plain_eps=… relay_vs_plain=… relay3_vs_plain=… pg_us_per_event=… plain_pg_us_per_event=… cpu_us_per_event=… plain_cpu_us_per_event=… wal_bytes_per_event=… plain_wal_bytes_per_event=… wal_eps=… wal_vs_relay=… wal_pg_us_per_event=… wal_wal_bytes_per_event=… wal_p99_ms=… pg_vs_plain=… cpu_vs_plain=… broker=… debezium_eps=… wal_vs_debezium=… wal_cpu_vs_debezium=… wal_p99_vs_debezium=… river_eps=… river1_eps=… relay_vs_river1=… relay_vs_river=… relay_pg_vs_river=… river_order_violations=… scheduled_vs_relay=… scheduled_pg_vs_relay=… kafkabatch_eps=… relay_vs_kafkabatch=… large_mbps=… direct_mbps=… large_vs_direct=… large_p99_ms=… direct_p99_ms=… large_cpu_ms_per_mb=… direct_cpu_ms_per_mb=… large_file_mbps=… large_file_vs_direct=… large_file_cpu_ms_per_mb=… idle_pg_ms_per_s=… idle3_pg_ms_per_s=… idle100_pg_ms_per_s=… idle3x100_pg_ms_per_s=… steady_pg_us_per_event=… steady_plain_pg_us_per_event=… steady_pg_vs_plain=…
//
// where pg_us_per_event, cpu_us_per_event (relay, PostgreSQL and broker
// together) and wal_bytes_per_event are the one-replica relay's drains, the
// plain_ ones the plain loop's (medians of the rounds), and pg_vs_plain and
// cpu_vs_plain the medians of each round's relay ÷ plain ratio of the same
// figures, which changes in the machine's speed from one round to the next
// do not move (see pairedRatio). A figure of a scenario that did not run
// is "-".
//
// With -db mariadb the bench runs on MariaDB or MySQL (-database-url a
// mysql:// URL, default $MYSQL_URL, of a user that may create databases):
// each scenario in a database of its own, created and dropped by the bench,
// its outbox made by the migrations package and its backlog written
// through txoutbox.Writer. Of a profile's scenarios it runs relay, relay3,
// plain, naive, forwarder, dblimit, kafkalimit and latency, and leaves out
// the others, saying which: wal, debezium and river are PostgreSQL's (its
// write-ahead log, River's driver), idle's relay groups over 100 tables
// and prune's partitioned outbox do not run on MySQL, write measures
// NOTIFY beside GORM and ent, and claim, memory, large and steady are not
// ported. The
// flags of PostgreSQL alone (-own-cluster, -statements, -sql-stats,
// -partition-size, -scheduled, -claim-backoff) are refused. What differs:
//
//   - plain: the same lean table, with an index on (status, id) where
//     PostgreSQL has a partial one. MySQL has no UPDATE ... RETURNING, so
//     the claim is SELECT ... WHERE status = 'pending' ORDER BY id LIMIT
//     1000 FOR UPDATE SKIP LOCKED and an UPDATE of the ids it returned, in
//     one READ COMMITTED transaction (as the relay's claim runs), and the
//     mark is one UPDATE ... WHERE id IN (...).
//   - naive: the same, 100 rows a claim, one UPDATE per row to mark.
//   - forwarder: watermill-sql's MySQL schema and offsets adapters
//     (DefaultMySQLSchema, DefaultMySQLOffsetsAdapter).
//   - latency: polling only (MySQL has no NOTIFY), at the relay's default
//     poll interval on MySQL, and at half the relay's median events/s of
//     the run unless -latency-rate is given.
//   - the server's cost: mysqld_cpu_us_per_event, the mysqld process's
//     utime + stime (all its threads, those that ended too), the process
//     found listening on the URL's port, or by the server's pid_file; and
//     mysqld_status_per_event, counters of SHOW GLOBAL STATUS per event
//     (statements, index and row reads, row updates, buffer pool reads,
//     redo bytes). Both are server-wide: the first line (mysqld_idle) says
//     what other sessions use. A connection is a thread there, not a
//     process, so the harness's poll for a relay drain's end is not left
//     out; it counts the backlog before the meter starts, and polls only
//     once every event is acknowledged.
//
// The summary line is then
//
//	bench: db=mariadb relay_eps=… relay3_eps=… plain_eps=… naive_eps=… forwarder_eps=… dblimit_eps=… kafkalimit_eps=… ceiling_eps=… relay_vs_plain=… relay3_vs_plain=… relay_vs_forwarder=… relay_vs_naive=… relay_vs_ceiling=… order_violations=… latency_rate=… p50_ms=… p99_ms=… mysqld_us_per_event=… plain_mysqld_us_per_event=… cpu_us_per_event=… plain_cpu_us_per_event=… db_cpu_vs_plain=… cpu_vs_plain=… kafkabatch_eps=… relay_vs_kafkabatch=… broker=…
//
// with PostgreSQL's keys where they apply, mysqld's CPU per event where
// PostgreSQL's would be, db_cpu_vs_plain the median of the rounds' relay ÷
// plain mysqld CPU per event (pg_vs_plain's counterpart), and latency_rate
// the latency scenario's events/s.
//
// A scenario that fails, a drain past -timeout among them, does not end
// the run: its JSON object has the error, the scenarios after it run, and
// the summary line ends with an entry for each failed scenario,
//
//	river_published=36432 river_backlog=100000 river_seconds=300.0 river_partial_eps=121 river_error="river64: 36432 of 100000 events published after 5m0s"
//
// the first four when the drain that stopped says how far it got, the
// error always, quoted as a Go string (logfmt). The figures the scenario
// had from drains that finished stay on the line; none is taken from a
// drain that did not. The command then exits with status 1. An interrupt
// (SIGINT, SIGTERM) ends the run after the scenario it stopped, with the
// summary of what ran.
//
// Scenarios (names for -skip; see profiles for which profile has which):
//
//   - relay, relay3: the relay (defaults: batch 1000, 64 lanes) draining the
//     backlog, one replica and three (goroutines of this process, each its
//     own relay.New and Kafka publisher); the topic is read back with
//     franz-go and per-key order violations counted.
//   - plain: the least a relay must do, on a lean table of its own (id,
//     aggregate_id, payload jsonb, status, created_at, published_at; a
//     partial index on pending ids): one worker claims 1,000 ids in id
//     order (UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED)),
//     publishes them on 64 lanes by hash of the aggregate id, each lane
//     synchronously, through one publisher, marks the acknowledged ids in
//     one UPDATE ... WHERE id = ANY($1), and claims again. No leases,
//     shards or retries: a bound on what the essential work costs, not a
//     relay to ship.
//   - naive: the design articles' sketch: claim 100 with SKIP LOCKED in a
//     short transaction, publish one by one, mark each row in its own
//     statement.
//   - forwarder: Watermill's outbox: the watermill-sql Postgres publisher in
//     transactions, components/forwarder to watermill-kafka, at subscriber
//     batch 100 and 1000; the better one counts.
//   - dblimit: the relay with a publisher that acknowledges at once, batch
//     1000: the claim/mark cycle alone.
//   - kafkalimit: the watermill-kafka publisher alone, 64 concurrent
//     publishers; then the relays' publisher alone with their batches (64
//     goroutines, PublishBatch of relay.LaneBatchDefault messages), the
//     bare publisher a relay is held against, -rounds times (summary:
//     kafkabatch_eps, the median, and relay_vs_kafkabatch).
//   - latency: events committed at a steady rate through the GORM plugin;
//     commit-to-ack p50/p99 with LISTEN/NOTIFY, and polling only.
//   - write: GORM and ent Create with the outbox against without, and the
//     Writer's NOTIFY on against off under 16 concurrent writers.
//   - claim: the relay's claim statement with a million published rows
//     retained (-claim-rows), and -claim-backoff rows in retry backoff,
//     against an empty table.
//   - -scheduled N: each relay round drains the backlog a second time
//     beside N rows scheduled a week ahead (Event.NotBefore), and claim
//     keeps them beside its retained rows (summary: scheduled_vs_relay,
//     scheduled_pg_vs_relay, claim_flatness).
//   - memory: peak RSS of an `outbox relay` process draining a million
//     events.
//   - prune: retention's cost: nine simulated days of -prune-day-rows
//     published events each, pruned with a week's retention (two days'
//     rows go) by a relay, on an unpartitioned outbox (batched DELETE)
//     and on one partitioned by a day's ids (a partition dropped):
//     PostgreSQL CPU and WAL bytes per event pruned, and the table's and
//     its indexes' size afterwards.
//   - wal: the WAL relay (relay/walrelay) beside the polling relay on the
//     same backlog: drain throughput, PostgreSQL CPU and WAL bytes per
//     event of each, and the WAL relay's commit-to-ack latency at
//     -latency-rate (summary: wal_eps, wal_vs_relay, wal_pg_us_per_event,
//     wal_wal_bytes_per_event, wal_p99_ms). The server needs wal_level =
//     logical.
//   - debezium: Debezium's PostgreSQL connector (3.6.1.Final, pgoutput)
//     with the outbox event router in Kafka Connect standalone (4.3.0,
//     the version Debezium 3.6.1 is built against), jars from Maven
//     Central (bench/debezium/pom.xml), draining the wal scenario's
//     backlog the same way (written while its warm JVM is stopped, so it
//     comes through the slot); its CPU counts the JVM; commit-to-append
//     p99 at -latency-rate from the topic's LogAppendTime (summary:
//     debezium_eps, wal_vs_debezium, wal_cpu_vs_debezium as total CPU per
//     event, wal_p99_vs_debezium).
//   - river: River used as an outbox (a job per event in the business
//     transaction, a worker that publishes it), one worker (ordered, on
//     -river1-events) and 64 (unordered, the median of -rounds drains),
//     at River's fastest fetch
//     settings (summary: river_eps, river1_eps, relay_vs_river1,
//     relay_vs_river, relay_pg_vs_river, river_order_violations).
//   - idle: relays with nothing to publish (one relay.Group per replica,
//     as outbox relay --schemas runs) over empty outboxes: 1 and 3 relays
//     over 1 and 100 tables, each measured for -idle-duration after
//     -idle-settle, as PostgreSQL's CPU per second less what it uses
//     without them (summary: idle_pg_ms_per_s, idle3_pg_ms_per_s,
//     idle100_pg_ms_per_s, idle3x100_pg_ms_per_s); with -statements, each
//     statement's calls per second.
//   - large: events of -large-bytes (2 MiB) through the claim check (the
//     payload to the S3 server of .ci/services, moto, a reference to a
//     topic at Kafka's default limit) against the same bytes published
//     directly to a topic whose max.message.bytes takes them (the
//     physical neighbour), one relay each: a drain of -large-events for
//     MB/s and CPU per MB (relay, PostgreSQL, broker and, on the claim
//     check's side, moto's own CPU, which a real bucket would not cost
//     this host), then -large-rate events/s for 10 s for the commit-to-ack
//     p99 (summary: large_mbps, direct_mbps, large_vs_direct,
//     large_p99_ms, direct_p99_ms, large_cpu_ms_per_mb,
//     direct_cpu_ms_per_mb); and the claim check again on a directory of
//     this host's disk (file://), its own cost without an S3 server's on
//     the same cores (summary: large_file_mbps, large_file_vs_direct,
//     large_file_cpu_ms_per_mb). Profile large runs it alone.
//   - steady: -steady-rate events a second, one per transaction, for
//     -steady-duration, while the relay (every default) or the plain loop
//     (polling every 50ms when a claim comes back short) publishes them:
//     PostgreSQL's CPU per event from the first commit to the last
//     publish, the writers' backends left out, so the relay's periodic
//     rounds, LISTEN and its polls are in it (summary:
//     steady_pg_us_per_event, steady_plain_pg_us_per_event,
//     steady_pg_vs_plain).
//
// Every Kafka scenario publishes through kafkapub.NewPublisher (Sarama with
// watermill-kafka's message format, acks=all), so they differ only in what
// drives the publisher: the relays through PublishBatch (see -lane-batch),
// with every default a user gets, kafkapub's linger included, on kfake as
// on the real cluster (-linger -1 leaves it out), the other loops one
// message per Publish, as
// watermill-kafka's publisher sends them, without a linger, which would
// only delay each of their requests.
//
// With -broker kafka the brokers are warmed first (warm.go): steps that
// do to them what the scenarios do (a topic recreated, records published
// through the relays' publisher and the loops', and read back) run until
// the brokers' JIT compiler threads have been near idle for three steps
// and their CPU per record settles (-broker-warmup), so the JIT's
// compilation of their hot code is in as few scenarios' figures as it can
// be. On this 2-core machine that takes millions of records (two to three
// minutes), over which the brokers' CPU per record falls fourfold or more.
//
// The drains compared in the goals' ratios run -rounds times (6 by
// default), interleaved: relay and plain (relay first in even rounds, plain
// first in odd ones), and in the wal scenario the polling and the WAL relay
// likewise. An even number of rounds has each side drain first as often
// (with five, one side did three times, and a drift within the rounds
// leaned its figures one way). The summary line takes each figure's median
// over the rounds, and pg_vs_plain and cpu_vs_plain the median of the
// rounds' ratios; the JSON objects give every round. On a 2-core virtual
// machine one drain's figures move by a fifth from one minute to the next,
// and a ratio of two single drains by as much; the medians of three rounds
// still put the same code's PostgreSQL ratio anywhere from 0.92 to 1.14.
//
// Every drain (relay, relay3, plain, naive, forwarder, dblimit) reports its
// cost per event (see cpu.go), read around the drain:
//
//   - relay_cpu_us_per_event: this process's CPU (/proc/self/stat utime +
//     stime). The relays, the plain and the naive loops and the forwarder
//     run in it, and do nothing else meanwhile but the relay scenarios' poll
//     for the end of the drain (one index-only EXISTS every 5 ms, which the
//     plain loop does not need: it sees the end itself);
//   - pg_cpu_us_per_event: the whole PostgreSQL cluster: the postmaster,
//     every live child, and the children that exited meanwhile (in the
//     postmaster's cutime and cstime). On a server others use, their work
//     is in it too: the pg_idle line printed first says how much, and
//     -own-cluster runs on a cluster of the bench's own;
//   - broker_cpu_us_per_event: the kfake process, or the cluster's three
//     nodes;
//   - wal_bytes_per_event: pg_wal_lsn_diff of pg_current_wal_lsn() after and
//     before, also cluster-wide.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// options are the command's flags.
type options struct {
	db              string // -db: dbPostgres or dbMariaDB
	databaseURL     string
	partitionSize   int64
	partitionsAhead bool
	events          int
	aggregates      int
	naiveEvents     int
	forwarderEvents int
	memoryEvents    int
	claimRows       int
	claimRounds     int
	latencyRate     int
	latencyRateSet  bool // -latency-rate given on the command line
	latencyDuration time.Duration
	writeOps        int
	notifyRounds    int
	notifyPhase     time.Duration
	batch, lanes    int
	laneBatch       int
	partitions      int
	timeout         time.Duration
	rounds          int
	skip            string
	profile         profile // -profile
	cpuprofile      string
	sqlStats        bool
	statements      bool
	idleDuration    time.Duration
	idleSettle      time.Duration
	ownCluster      bool
	maxOpenRequests int
	idempotent      bool
	compression     sarama.CompressionCodec
	linger          time.Duration
	brokerWarmup    int
	broker          string
	river1Events    int
	claimBackoff    int
	scheduled       int
	pruneDayRows    int
	largeEvents     int
	largeBytes      int
	largeRate       int
	steadyRate      int
	steadyDuration  time.Duration
}

var scenarioNames = []string{"relay", "relay3", "plain", "naive", "forwarder", "dblimit", "kafkalimit", "latency", "write", "claim", "memory", "wal", "debezium", "river", "prune", "large", "idle", "steady"}

func main() {
	var o options
	flag.StringVar(&o.db, "db", dbPostgres, "the database: postgres, or mariadb (MariaDB or MySQL: the scenarios of "+strings.Join(mariaDBScenarios, ",")+
		" alone, each in a database of its own on the server; the others are PostgreSQL's or not ported, and -own-cluster, -statements, -sql-stats, -partition-size, -scheduled and -claim-backoff are refused)")
	flag.StringVar(&o.databaseURL, "database-url", "", "the server: PostgreSQL's (default $DATABASE_URL or the local server with trust auth), where scenarios use schemas of its database "+benchDatabase+
		"; with -db mariadb a mysql:// URL (default $MYSQL_URL or "+testkit.MySQLURLDefault+") of a user that may create databases")
	flag.IntVar(&o.events, "events", 100_000, "backlog of the relay, relay3, dblimit and kafkalimit scenarios")
	flag.IntVar(&o.aggregates, "aggregates", 1000, "aggregates the events are spread over (round-robin)")
	flag.IntVar(&o.naiveEvents, "naive-events", 20_000, "backlog of the naive scenario (it runs at about 1k/s)")
	flag.IntVar(&o.forwarderEvents, "forwarder-events", 20_000, "backlog of each forwarder run (it runs at a few k/s)")
	flag.IntVar(&o.memoryEvents, "memory-events", 1_000_000, "backlog the relay process drains in the memory scenario")
	flag.IntVar(&o.claimRows, "claim-rows", 1_000_000, "published rows retained in the claim scenario")
	flag.IntVar(&o.claimRounds, "claim-rounds", 30, "timed claims per table in the claim scenario")
	flag.IntVar(&o.scheduled, "scheduled", 0, "rows scheduled a week ahead (Event.NotBefore, each of an aggregate of its own): each relay round drains the backlog again beside them, and the claim scenario keeps them beside its retained rows; they must cost neither")
	flag.IntVar(&o.claimBackoff, "claim-backoff", 0, "rows in retry backoff (each of an aggregate of its own) beside the retained rows in the claim scenario")
	flag.IntVar(&o.pruneDayRows, "prune-day-rows", 200_000, "published events a simulated day in the prune scenario (nine days, a week retained)")
	flag.IntVar(&o.latencyRate, "latency-rate", 1000, "events committed per second in the latency scenario (with -db mariadb, unless given: half the relay's median events/s of the run, this when the relay did not run)")
	flag.IntVar(&o.largeEvents, "large-events", 100, "events the large scenario drains on each side")
	flag.IntVar(&o.largeBytes, "large-bytes", 2<<20, "payload bytes of each of the large scenario's events (at most 4 MiB)")
	flag.IntVar(&o.largeRate, "large-rate", 5, "events committed per second for the large scenario's latency (10 seconds on each side)")
	flag.DurationVar(&o.latencyDuration, "latency-duration", 10*time.Second, "how long each latency run writes")
	flag.IntVar(&o.steadyRate, "steady-rate", 2000, "events committed per second, one per transaction, in the steady scenario")
	flag.DurationVar(&o.steadyDuration, "steady-duration", 10*time.Second, "how long each side of the steady scenario writes")
	flag.IntVar(&o.writeOps, "write-ops", 2000, "Creates per arm in the GORM and ent overhead measurements")
	flag.IntVar(&o.notifyRounds, "notify-rounds", 3, "on/off phase pairs of the NOTIFY cost measurement")
	flag.DurationVar(&o.notifyPhase, "notify-phase", 2*time.Second, "length of one NOTIFY cost phase")
	flag.IntVar(&o.batch, "batch", 0, "relay BatchSize for relay, relay3 and latency (0: the relay's default)")
	flag.IntVar(&o.lanes, "lanes", 0, "relay Lanes for relay, relay3 and latency (0: the relay's default)")
	flag.IntVar(&o.laneBatch, "lane-batch", 0, "relay and WAL relay LaneBatch (0: the default; 1 sends one event per Publish)")
	flag.IntVar(&o.partitions, "partitions", 8, "partitions of the broker's topics")
	flag.Int64Var(&o.partitionSize, "partition-size", 0, "make every scenario's outbox a partitioned one (outbox migrate partition) with partitions of this many ids (0: unpartitioned)")
	flag.BoolVar(&o.partitionsAhead, "partitions-ahead", false, "with -partition-size, create the partitions for the backlog before it is written, as relays' rounds would while writers write (without it, the ids past two partitions go to the default partition)")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "longest a single drain may take; its scenario then fails with the drain's partial figures on the summary line, and the run goes on")
	flag.IntVar(&o.rounds, "rounds", 6, "rounds of the drains compared with each other (relay with plain, and in the wal scenario the WAL relay with the polling relay), interleaved, and of the bare publisher's bursts (kafkabatch); the summary takes each figure's median")
	flag.StringVar(&o.skip, "skip", "", "comma-separated scenarios of the profile to skip: "+strings.Join(scenarioNames, ","))
	profileName := flag.String("profile", "default", profileUsage())
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the harness process while the one-replica relay drains (the large scenario: to FILE.claimcheck and FILE.direct, while each side drains)")
	flag.BoolVar(&o.sqlStats, "sql-stats", false, "record the relay's claim and mark statements (count, rows, time) in relay, relay3 and dblimit; the relays then poll instead of LISTENing")
	flag.BoolVar(&o.statements, "statements", false, "read every statement of each drain from pg_stat_statements (calls, rows, server time, buffers, WAL), print them per 1,000 events and add them to the drain's JSON; needs the extension preloaded, as -own-cluster's cluster has it")
	flag.DurationVar(&o.idleDuration, "idle-duration", 20*time.Second, "how long the idle scenario measures each shape (1 and 3 relays over 1 and 100 empty tables)")
	flag.DurationVar(&o.idleSettle, "idle-settle", 5*time.Second, "how long the idle scenario lets its relays start before it measures")
	flag.BoolVar(&o.ownCluster, "own-cluster", false, "run on a PostgreSQL 15 cluster of the bench's own (created with pg_createcluster as \"bench\" on port 5441, started, and stopped at the end if it was down), so no other session's work is in the PostgreSQL CPU and WAL figures; overrides -database-url")
	flag.IntVar(&o.maxOpenRequests, "max-open-requests", 1, "Sarama Net.MaxOpenRequests of every Kafka publisher (an experiment: above 1 a retry may reorder a partition; needs -idempotent=false)")
	flag.IntVar(&o.brokerWarmup, "broker-warmup", 200, "with -broker kafka, run up to this many warm-up steps (52,000 records published and read back) before the scenarios, doing what the scenarios do, until the brokers' JIT compiler threads are quiet and their CPU per record settles; 0: none")
	flag.DurationVar(&o.linger, "linger", 0, "kafkapub.Config.Linger of the relays' Kafka publishers (0: kafkapub's default, 5ms, on kfake as on the real cluster; negative: none, each request sent as soon as the one before is answered)")
	flag.BoolVar(&o.idempotent, "idempotent", true, "Sarama's idempotent producer in every Kafka publisher (kafkapub's default)")
	flag.TextVar(&o.compression, "compression", sarama.CompressionNone, "compression of every Kafka producer, the relays' and Debezium's alike: none (kafkapub's and Kafka's default), gzip, snappy, lz4 or zstd")
	flag.IntVar(&o.river1Events, "river1-events", 10_000, "backlog of the river scenario's one-worker drain (it runs at a few hundred events/s); the unordered drain takes -events")
	flag.StringVar(&o.broker, "broker", "kfake", "the broker: kfake (a kfakeproc process of the bench's own) or kafka (the 3-node Apache Kafka cluster of .ci/services, or "+kafkatest.EnvClusterBrokers+"; topics of three replicas, made anew per drain)")
	flag.Parse()
	o.databaseURL = cmp.Or(o.databaseURL, defaultDatabaseURL(o.db))
	flag.Visit(func(f *flag.Flag) { o.latencyRateSet = o.latencyRateSet || f.Name == "latency-rate" })
	var err error
	if o.profile, err = profileNamed(*profileName); err == nil {
		err = o.profile.apply(flag.CommandLine)
	}
	if err == nil {
		err = o.validate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func (o options) validate() error {
	switch o.db {
	case dbPostgres:
	case dbMariaDB:
		if err := o.validateMariaDB(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("-db %q: want %s or %s", o.db, dbPostgres, dbMariaDB)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"events", o.events}, {"aggregates", o.aggregates}, {"naive-events", o.naiveEvents}, {"forwarder-events", o.forwarderEvents},
		{"memory-events", o.memoryEvents}, {"claim-rows", o.claimRows}, {"claim-rounds", o.claimRounds}, {"latency-rate", o.latencyRate},
		{"write-ops", o.writeOps}, {"large-events", o.largeEvents}, {"large-bytes", o.largeBytes}, {"large-rate", o.largeRate}, {"steady-rate", o.steadyRate}, {"prune-day-rows", o.pruneDayRows}, {"notify-rounds", o.notifyRounds}, {"partitions", o.partitions}, {"rounds", o.rounds}} {
		if f.v < 1 {
			return fmt.Errorf("-%s must be at least 1, got %d", f.name, f.v)
		}
	}
	if o.largeBytes > 4<<20 {
		return fmt.Errorf("-large-bytes must be at most 4 MiB (the direct side's topic limit), got %d", o.largeBytes)
	}
	if o.aggregates > 99_999 {
		return fmt.Errorf("-aggregates must be at most 99999, got %d", o.aggregates)
	}
	if o.maxOpenRequests < 1 {
		return fmt.Errorf("-max-open-requests must be at least 1, got %d", o.maxOpenRequests)
	}
	if o.maxOpenRequests > 1 && o.idempotent {
		return fmt.Errorf("-max-open-requests %d needs -idempotent=false: Sarama allows its idempotent producer only one request in flight", o.maxOpenRequests)
	}
	if o.batch < 0 || o.lanes < 0 || o.laneBatch < 0 {
		return fmt.Errorf("-batch, -lanes and -lane-batch must not be negative")
	}
	if o.latencyDuration < time.Second || o.steadyDuration < time.Second || o.notifyPhase <= 0 || o.timeout <= 0 {
		return fmt.Errorf("-latency-duration and -steady-duration must be at least 1s, -notify-phase and -timeout positive")
	}
	for _, name := range strings.Split(o.skip, ",") {
		if name = strings.TrimSpace(name); name != "" && !contains(scenarioNames, name) {
			return fmt.Errorf("-skip: unknown scenario %q (want %s)", name, strings.Join(scenarioNames, ","))
		}
	}
	if len(o.runs()) == 0 {
		return fmt.Errorf("-profile %s (%s) with -skip %s leaves no scenario to run; -profile all has every one", o.profile.name, strings.Join(o.profile.scenarios, ","), o.skip)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// runs returns the scenarios of the run, in scenarioNames' order.
func (o options) runs() []string {
	var names []string
	for _, name := range scenarioNames {
		if !o.skipped(name) {
			names = append(names, name)
		}
	}
	return names
}

// skipped reports whether the scenario is left out of the run: not in the
// profile, named in -skip, or not one of MariaDB's under -db mariadb.
func (o options) skipped(name string) bool {
	if !o.profile.runs(name) || o.db == dbMariaDB && !slices.Contains(mariaDBScenarios, name) {
		return true
	}
	for _, s := range strings.Split(o.skip, ",") {
		if strings.TrimSpace(s) == name {
			return true
		}
	}
	return false
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func run(ctx context.Context, o options) error {
	began := time.Now()
	if o.ownCluster {
		stop, url, err := startOwnCluster(ctx)
		if err != nil {
			return err
		}
		defer stop()
		o.databaseURL = url
	}
	logf("profile %s: %s", o.profile.name, strings.Join(o.runs(), ","))
	dbURL := o.databaseURL
	if o.db == dbMariaDB {
		if out := o.leftOutOnMariaDB(); len(out) > 0 {
			logf("-db mariadb: the profile's %s left out (PostgreSQL's, or not ported to MariaDB)", strings.Join(out, ","))
		}
	} else {
		var err error
		if dbURL, err = testkit.EnsureDatabase(ctx, o.databaseURL, benchDatabase); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "txoutbox-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	e := &env{dbURL: dbURL, tmp: tmp, opts: o, mysql: o.db == dbMariaDB}

	logf("building the broker and the outbox CLI")
	var outboxBin string
	if !o.skipped("memory") {
		if outboxBin, err = kafkatest.Build(ctx, "github.com/txoutbox/txoutbox/cmd/outbox", tmp); err != nil {
			return err
		}
	}
	switch o.broker {
	case "kafka":
		// No test may use the cluster meanwhile: its records and CPU
		// would be in the figures.
		unlock, err := kafkatest.LockClusterFile(true)
		if err != nil {
			return err
		}
		defer unlock()
		e.brokers, e.real = kafkatest.ClusterBrokers(), true
		defer e.dropTopics() // before unlock
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = kafkatest.WaitCluster(wctx, e.brokers, len(e.brokers))
		cancel()
		if err != nil {
			return fmt.Errorf("the Kafka cluster at %s is not serving (start it with: bash .ci/services kafka): %w", strings.Join(e.brokers, ","), err)
		}
		for _, n := range kafkatest.ClusterNodes() {
			if pid, err := n.PID(); err == nil && n.Running() {
				e.brokerPids = append(e.brokerPids, pid)
			}
		}
		if len(e.brokerPids) != len(e.brokers) {
			logf("the cluster's processes are not all on this host: broker CPU is not measured")
			e.brokerPids = nil
		}
		logf("broker: the Apache Kafka cluster at %s (pids %v)", strings.Join(e.brokers, ","), e.brokerPids)
		for _, pid := range e.brokerPids {
			if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmdline), "TieredStopAtLevel=1") {
				logf("WARNING: broker %d runs with C1 alone (-XX:TieredStopAtLevel=1), as the test suite starts it: its CPU per record is about 1.6 times a production broker's; for the real-cluster figures start the cluster with KAFKA_JIT=full bash .ci/services kafka", pid)
				break
			}
		}
		if err := warmBrokers(ctx, e, o.brokerWarmup); err != nil {
			return err
		}
	case "kfake":
		// The broker runs in a process of its own, so its CPU is not in
		// the profile or the scheduler of the process under test.
		brokerBin, err := kafkatest.Build(ctx, kafkatest.ProcPackage, tmp)
		if err != nil {
			return err
		}
		b, err := kafkatest.StartProc(ctx, brokerBin, []string{"-partitions", fmt.Sprint(o.partitions)}, os.Stderr)
		if err != nil {
			return err
		}
		defer b.Stop(10 * time.Second) //nolint:errcheck // the run's results are out
		e.brokers, e.brokerPids = []string{b.Addr}, []int{b.Pid()}
		logf("broker (pid %d) at %s", b.Pid(), b.Addr)
	default:
		return fmt.Errorf("-broker %q: want kfake or kafka", o.broker)
	}
	if err := e.findServer(ctx); err != nil {
		return err
	}

	sum := newSummary()
	sum.Broker, sum.DB = o.broker, o.db
	out := json.NewEncoder(os.Stdout)
	emit := func(v any) error {
		if t, ok := v.(throughput); ok && t.Cost != nil && len(t.Cost.Statements) > 0 {
			logStatements(t.Scenario, t.Round, t.Events, t.Cost.Statements)
			logf("PostgreSQL CPU by process, µs per event: %v", t.Cost.PGParts)
		}
		return out.Encode(v)
	}
	switch {
	case e.postmaster != 0:
		// What the server does without the bench: every PostgreSQL CPU
		// figure below includes it.
		idle, err := e.idleCluster(2 * time.Second)
		if err != nil {
			return err
		}
		logf("PostgreSQL (postmaster pid %d) uses %.1f ms CPU per second while the bench is idle", e.postmaster, idle/1000)
		if err := emit(map[string]any{"scenario": "pg_idle", "seconds": 2, "pg_cpu_ms_per_s": math.Round(idle/100) / 10}); err != nil {
			return err
		}
	case e.mysqld != 0:
		// Likewise: the other sessions on the server are in every
		// mysqld figure.
		idle, err := e.idleMySQLd(2 * time.Second)
		if err != nil {
			return err
		}
		logf("mysqld (pid %d) uses %.1f ms CPU per second while the bench is idle", e.mysqld, idle/1000)
		if err := emit(map[string]any{"scenario": "mysqld_idle", "seconds": 2, "mysqld_cpu_ms_per_s": math.Round(idle/100) / 10}); err != nil {
			return err
		}
	case e.mysql:
		logf("mysqld is not on this host: its CPU is not measured")
	default:
		logf("PostgreSQL is not on this host: its CPU is not measured")
	}
	cpuprofile := ""
	if o.cpuprofile != "" {
		cpuprofile, _ = filepath.Abs(o.cpuprofile)
	}
	all := []scenario{
		{"relay", func() error {
			relays, plains, scheds, err := runRelayRounds(ctx, e, cpuprofile, !o.skipped("plain"), emit)
			if err != nil {
				return err
			}
			sum.RelayEPS, sum.Relay = medianDrain(relays)
			if len(scheds) > 0 {
				eps, _ := medianDrain(scheds)
				sum.ScheduledVsRelay = eps / sum.RelayEPS
				sum.ScheduledPGVsRelay = pairedRatio(scheds, relays, pgUS)
			}
			if len(plains) > 0 {
				sum.PlainEPS, sum.Plain = medianDrain(plains)
				sum.DBVsPlain = pairedRatio(relays, plains, serverUS)
				sum.CPUVsPlain = pairedRatio(relays, plains, totalUS)
			}
			for _, r := range append(relays, plains...) {
				sum.addViolations(r.OrderViolations)
			}
			return nil
		}},
		{"relay3", func() error {
			r, err := runRelayScenario(ctx, e, 3, 0, "", 0)
			if err != nil {
				return err
			}
			sum.Relay3EPS = r.EPS
			sum.addViolations(r.OrderViolations)
			return emit(r)
		}},
		{"plain", func() error {
			var plains []throughput
			for round := range o.rounds {
				r, err := runPlain(ctx, e, round)
				if err != nil {
					return err
				}
				sum.addViolations(r.OrderViolations)
				plains = append(plains, r)
				if err := emit(r); err != nil {
					return err
				}
			}
			sum.PlainEPS, sum.Plain = medianDrain(plains)
			return nil
		}},
		{"naive", func() error {
			r, err := runNaive(ctx, e)
			if err != nil {
				return err
			}
			sum.NaiveEPS = r.EPS
			return emit(r)
		}},
		{"forwarder", func() error {
			for _, batch := range []int{100, 1000} {
				r, err := runForwarder(ctx, e, batch)
				if err != nil {
					return err
				}
				if math.IsNaN(sum.ForwarderEPS) || r.EPS > sum.ForwarderEPS {
					sum.ForwarderEPS = r.EPS
				}
				if err := emit(r); err != nil {
					return err
				}
			}
			return nil
		}},
		{"dblimit", func() error {
			r, err := runDBLimit(ctx, e)
			if err != nil {
				return err
			}
			sum.DBLimitEPS = r.EPS
			return emit(r)
		}},
		{"kafkalimit", func() error {
			r, err := runKafkaLimit(ctx, e)
			if err != nil {
				return err
			}
			sum.KafkaLimitEPS = r.EPS
			if err := emit(r); err != nil {
				return err
			}
			// As many rounds as the relay's, and their median: one 50,000-
			// record burst takes under half a second on the warm real
			// cluster, short enough for a GC pause or a compile in the
			// brokers to move it by half.
			var batches []float64
			for round := range o.rounds {
				if r, err = runKafkaBatch(ctx, e, round); err != nil {
					return err
				}
				batches = append(batches, r.EPS)
				if err := emit(r); err != nil {
					return err
				}
			}
			sum.KafkaBatchEPS = median(batches)
			return nil
		}},
		{"large", func() error {
			var sides [3]largeBench
			for i, mode := range []string{largeDirect, largeS3, largeFileStore} {
				r, err := runLarge(ctx, e, mode)
				if err != nil {
					return err
				}
				sides[i] = r
				if err := emit(r); err != nil {
					return err
				}
			}
			sum.addLarge(sides[1], sides[2], sides[0])
			return nil
		}},
		{"steady", func() error {
			var sides [2]steadyBench
			for i, plain := range []bool{false, true} {
				r, err := runSteady(ctx, e, plain)
				if err != nil {
					return err
				}
				sides[i] = r
				if e.opts.statements && r.Cost != nil {
					logStatements("steady "+r.Mode, 0, r.Events, r.Cost.Statements)
				}
				if err := emit(r); err != nil {
					return err
				}
			}
			sum.addSteady(sides[0], sides[1])
			return nil
		}},
		{"idle", func() error {
			costs, err := runIdle(ctx, e, emit)
			sum.addIdle(costs)
			return err
		}},
		{"latency", func() error {
			modes, rate := []bool{true, false}, o.latencyRate
			if e.mysql {
				// No NOTIFY: the relay polls. At half the relay's
				// events/s of the run unless -latency-rate says.
				modes = []bool{false}
				if !o.latencyRateSet && !math.IsNaN(sum.RelayEPS) {
					rate = max(int(math.Round(sum.RelayEPS/2)), 1)
				}
			}
			sum.LatencyRate = float64(rate)
			for _, notify := range modes {
				r, err := runLatency(ctx, e, notify, rate)
				if err != nil {
					return err
				}
				if notify || e.mysql {
					sum.P50MS, sum.P99MS = r.P50MS, r.P99MS
				}
				if err := emit(r); err != nil {
					return err
				}
			}
			return nil
		}},
		{"write", func() error {
			g, err := runGormOverhead(ctx, e)
			if err != nil {
				return err
			}
			sum.GormOverhead = g.Ratio
			if err := emit(g); err != nil {
				return err
			}
			en, err := runEntOverhead(ctx, e)
			if err != nil {
				return err
			}
			sum.EntOverhead = en.Ratio
			if err := emit(en); err != nil {
				return err
			}
			n, err := runNotifyCost(ctx, e)
			if err != nil {
				return err
			}
			return emit(n)
		}},
		{"claim", func() error {
			r, err := runClaim(ctx, e)
			if err != nil {
				return err
			}
			sum.ClaimFlatness = r.Flatness
			return emit(r)
		}},
		{"prune", func() error {
			r, err := runPrune(ctx, e)
			if err != nil {
				return err
			}
			return emit(r)
		}},
		{"memory", func() error {
			r, err := runMemory(ctx, e, outboxBin)
			if err != nil {
				return err
			}
			sum.RelayRSSMiB = r.PeakMiB
			return emit(r)
		}},
		{"wal", func() error {
			r, err := runWAL(ctx, e)
			if err != nil {
				return err
			}
			sum.addWAL(r)
			if r.delivery != nil {
				sum.addViolations(r.OrderViolations)
			}
			return emit(r)
		}},
		{"river", func() error {
			r, err := runRiver(ctx, e, 1)
			if err != nil {
				return err
			}
			sum.River1EPS = r.EPS
			sum.addViolations(r.OrderViolations) // one worker keeps order: a violation is a bench bug
			if err := emit(r); err != nil {
				return err
			}
			// The unordered drain's PostgreSQL CPU per event is in a goal
			// (relay_pg_vs_river), and it moves with the drain's speed (112
			// to 205 µs in three single drains at 1,560-2,980 events/s):
			// the median of -rounds drains, as the relays' figures are.
			var drains []throughput
			violations := 0
			for range max(e.opts.rounds, 1) {
				r, err := runRiver(ctx, e, riverUnorderedWorkers)
				if err != nil {
					return err
				}
				drains = append(drains, r)
				violations += r.OrderViolations
				if err := emit(r); err != nil {
					return err
				}
			}
			eps, c := medianDrain(drains)
			sum.RiverEPS, sum.RiverPGUS, sum.RiverOrderViolations = eps, figure(c, pgUS), float64(violations)
			return nil
		}},
		{"debezium", func() error {
			if !e.real {
				logf("debezium: skipped: it runs with -broker kafka")
				return nil
			}
			r, err := runDebezium(ctx, e)
			if err != nil {
				return err
			}
			sum.addDebezium(r)
			if r.delivery != nil {
				sum.addViolations(r.OrderViolations)
			}
			return emit(r)
		}},
	}
	var scenarios []scenario
	for _, s := range all {
		if o.skipped(s.name) || s.name == "plain" && !o.skipped("relay") { // plain drains in the relay's rounds
			continue
		}
		scenarios = append(scenarios, s)
	}
	failed := runScenarios(ctx, scenarios, &sum, emit)
	fmt.Println(sum.String())
	logf("run done in %s", time.Since(began).Round(time.Second))
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted: %w", err)
	}
	if len(failed) > 0 {
		return failedError(failed)
	}
	return nil
}
