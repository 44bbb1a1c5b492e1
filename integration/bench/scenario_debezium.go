package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
)

// debeziumBench is Debezium, the CDC anchor, as its users run it: Kafka
// Connect standalone (connect-runtime 4.3.0) with the PostgreSQL connector
// (3.6.1.Final, pgoutput) and the outbox event router, mapped to
// txoutbox's columns as docs/debezium.md says, reading the same outbox
// table from the same PostgreSQL into the same cluster, keyed by
// aggregate. Its figures stand beside the wal scenario's, which drains the
// same backlog the same way: written while the reader is held, so it
// arrives through the slot.
type debeziumBench struct {
	Scenario string  `json:"scenario"`
	Events   int     `json:"events"`
	EPS      float64 `json:"eps"`
	// Cost is the median drain's: relay_cpu_us_per_event is the Connect
	// JVM's (connector, router and producer).
	Cost     *cost          `json:"cost,omitempty"`
	P50MS    float64        `json:"p50_ms"`
	P99MS    float64        `json:"p99_ms"`
	Settings map[string]any `json:"settings"`
	Rounds   []throughput   `json:"rounds"`
	*delivery
}

// debeziumWarmup events go through once before the rounds, so the JVM's
// code is compiled and the producer has its metadata, as in a Connect
// worker that has been running. With 5,000 the first round still cost
// the Connect JVM twice the CPU per event of the later ones (265 against
// 97-129 µs): C2 compiles after thousands of calls per method.
const debeziumWarmup = 50_000

func runDebezium(ctx context.Context, e *env) (debeziumBench, error) {
	res := debeziumBench{Scenario: "debezium", Events: e.opts.events}
	lib, err := debeziumLib(ctx)
	if err != nil {
		return res, err
	}
	s, err := e.newSchema(ctx, "debezium")
	if err != nil {
		return res, err
	}
	defer s.close()
	c, err := startConnect(ctx, e, s, lib)
	if err != nil {
		return res, err
	}
	defer c.stop(s)
	res.Settings = map[string]any{"connect": "standalone 4.3.0", "connector": "debezium-connector-postgres 3.6.1.Final, pgoutput",
		"transform": "io.debezium.transforms.outbox.EventRouter", "producer": "acks=all, idempotent, compression " + e.opts.compression.String() + " (Connect's defaults otherwise)",
		"tx_events": walTxEvents, "rounds": e.opts.rounds, "heap": debeziumHeap}

	warm, err := e.topic(ctx, "bench.debezium.warm")
	if err != nil {
		return res, err
	}
	if err := insertBacklogTx(ctx, s, warm, debeziumWarmup, e.opts.aggregates); err != nil {
		return res, err
	}
	if err := waitRecords(ctx, e.brokers, warm, debeziumWarmup, e.opts.timeout); err != nil {
		return res, fmt.Errorf("debezium: warm-up: %w; Connect's log:\n%s", err, c.problems())
	}
	for round := range e.opts.rounds {
		logf("debezium: round %d", round)
		d, err := debeziumDrain(ctx, e, s, c, round)
		if err != nil {
			return res, err
		}
		res.Rounds = append(res.Rounds, d)
		res.delivery = res.delivery.plus(d.delivery)
	}
	res.EPS, res.Cost = medianDrain(res.Rounds)
	res.P50MS, res.P99MS, err = debeziumLatency(ctx, e, s)
	return res, err
}

// debeziumDrain holds the Connect JVM (SIGSTOP), writes a backlog, lets it
// go and times it until the topic holds every event.
func debeziumDrain(ctx context.Context, e *env, s *schemaDB, c *connect, round int) (throughput, error) {
	topic, err := e.topic(ctx, fmt.Sprintf("bench.debezium.%d", round))
	if err != nil {
		return throughput{}, err
	}
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return throughput{}, err
	}
	err = insertBacklogTx(ctx, s, topic, e.opts.events, e.opts.aggregates)
	m := e.startMeter(ctx, s.SQL).relayPID(c.cmd.Process.Pid)
	start := time.Now()
	if cerr := c.cmd.Process.Signal(syscall.SIGCONT); cerr != nil {
		return throughput{}, cerr
	}
	if err != nil {
		return throughput{}, err
	}
	if err := waitRecords(ctx, e.brokers, topic, e.opts.events, e.opts.timeout); err != nil {
		return throughput{}, fmt.Errorf("debezium: round %d: %w; Connect's log:\n%s", round, err, c.problems())
	}
	took := time.Since(start)
	cst := m.stop(ctx, e.opts.events)
	res := newThroughput("debezium", e.opts.events, took, nil)
	res.Cost, res.Round = cst, round
	return e.withDelivery(ctx, res, topic)
}

// debeziumLatency commits events at -latency-rate for -latency-duration
// with Debezium streaming and returns the p50 and p99 of commit to the
// broker's append (the topic's LogAppendTime): when Connect's producer got
// its acknowledgement, to the broker's clock on this host.
func debeziumLatency(ctx context.Context, e *env, s *schemaDB) (p50, p99 float64, err error) {
	topic := "bench.debezium.latency"
	if e.real {
		if err = e.recreateTopic(ctx, topic, map[string]string{"message.timestamp.type": "LogAppendTime"}); err != nil {
			return 0, 0, err
		}
	} else {
		return 0, 0, errors.New("debezium latency needs -broker kafka (the topic's LogAppendTime)")
	}
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: s.Table, DisableNotify: true})
	if err != nil {
		return 0, 0, err
	}
	// A second of warm-up at the rate, as in the WAL relay's measurement.
	if _, err := commitPaced(ctx, s, w, topic, e.opts.latencyRate, e.opts.latencyRate, 1_000_000_000, e.opts.aggregates); err != nil {
		return 0, 0, fmt.Errorf("debezium latency: warm-up: %w", err)
	}
	n := e.opts.latencyRate * int(e.opts.latencyDuration/time.Second)
	commits, err := commitPaced(ctx, s, w, topic, e.opts.latencyRate, n, 0, e.opts.aggregates)
	if err != nil {
		return 0, 0, fmt.Errorf("debezium latency: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	lat := make([]float64, 0, n)
	err = kafkatest.Consume(rctx, e.brokers, []string{topic}, 0, func(r *kgo.Record) bool {
		id, perr := uuid.Parse(kafkatest.Header(r, "event_id"))
		if c, ok := commits[id]; perr == nil && ok {
			lat = append(lat, max(r.Timestamp.Sub(c), 0).Seconds()*1000)
			delete(commits, id)
		}
		return len(commits) > 0
	})
	if err != nil {
		return 0, 0, fmt.Errorf("debezium latency: %d of %d events read: %w", len(lat), n, err)
	}
	slices.Sort(lat)
	return quantile(lat, 0.50), quantile(lat, 0.99), nil
}

// waitRecords waits until topic's partitions hold want records in all,
// reading only the end offsets, so the wait costs the broker next to
// nothing.
func waitRecords(ctx context.Context, brokers []string, topic string, want int, timeout time.Duration) error {
	start := time.Now()
	deadline := start.Add(timeout)
	have := int64(0)
	for {
		ends, err := kafkatest.EndOffsets(ctx, brokers, []string{topic})
		if err == nil {
			have = 0
			for _, end := range ends[topic] {
				have += end
			}
			if have >= int64(want) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s: %w", topic, &incompleteError{Published: have, Backlog: int64(want), Elapsed: time.Since(start), Err: err})
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// debeziumHeap is the Connect JVM's heap.
const debeziumHeap = "1g"

// connect is a running Kafka Connect standalone worker with the connector.
type connect struct {
	cmd       *exec.Cmd
	done      chan struct{}
	slot, pub string
	log       string
}

// debeziumLib is the directory of Connect's and Debezium's jars, copied
// from Maven Central once (debezium/pom.xml) into the services directory.
func debeziumLib(ctx context.Context) (string, error) {
	lib := filepath.Join(kafkatest.ServicesDir(), "debezium-3.6.1.Final-connect-4.3.0", "lib")
	if _, err := os.Stat(filepath.Join(lib, ".complete")); err == nil {
		return lib, nil
	}
	pom, err := filepath.Abs(filepath.Join("bench", "debezium", "pom.xml"))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(pom); err != nil {
		return "", fmt.Errorf("debezium: run the bench from the integration module's directory (%w)", err)
	}
	logf("debezium: copying Connect's and Debezium's jars from Maven Central to %s", lib)
	if err := os.RemoveAll(lib); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "mvn", "-q", "-B", "-f", pom, "dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+lib)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("debezium: mvn: %w: %s", err, out)
	}
	return lib, os.WriteFile(filepath.Join(lib, ".complete"), nil, 0o644)
}

// startConnect writes the worker's and the connector's settings and starts
// Connect standalone, returning once the connector streams its slot.
func startConnect(ctx context.Context, e *env, s *schemaDB, lib string) (*connect, error) {
	u, err := url.Parse(e.dbURL)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(e.tmp, "debezium-")
	if err != nil {
		return nil, err
	}
	pw, _ := u.User.Password()
	c := &connect{slot: "dbz_" + s.Schema, pub: "dbz_" + s.Schema, log: filepath.Join(dir, "connect.log"), done: make(chan struct{})}
	files := map[string]string{
		"worker.properties": strings.Join([]string{
			"bootstrap.servers=" + strings.Join(e.brokers, ","),
			"key.converter=org.apache.kafka.connect.storage.StringConverter",
			"value.converter=org.apache.kafka.connect.converters.ByteArrayConverter",
			"offset.storage.file.filename=" + filepath.Join(dir, "offsets.dat"),
			"offset.flush.interval.ms=1000",
			"listeners=http://127.0.0.1:0",
			"plugin.path=" + dir,
			// As the relay's publisher: every in-sync replica, idempotent.
			"producer.acks=all",
			"producer.enable.idempotence=true",
			"producer.compression.type=" + e.opts.compression.String(),
		}, "\n"),
		"connector.properties": strings.Join([]string{
			"name=txoutbox-bench",
			"connector.class=io.debezium.connector.postgresql.PostgresConnector",
			"tasks.max=1",
			"plugin.name=pgoutput",
			"database.hostname=" + u.Hostname(),
			"database.port=" + u.Port(),
			"database.user=" + u.User.Username(),
			"database.password=" + pw,
			"database.dbname=" + strings.TrimPrefix(u.Path, "/"),
			"topic.prefix=bench_debezium",
			"slot.name=" + c.slot,
			"publication.name=" + c.pub,
			"publication.autocreate.mode=filtered",
			"table.include.list=" + s.Schema + ".outbox",
			"snapshot.mode=no_data",
			// docs/debezium.md: the router on txoutbox's columns.
			"transforms=outbox",
			"transforms.outbox.type=io.debezium.transforms.outbox.EventRouter",
			"transforms.outbox.table.field.event.id=event_id",
			"transforms.outbox.table.field.event.key=aggregate_id",
			"transforms.outbox.table.field.event.payload=payload",
			"transforms.outbox.route.by.field=topic",
			"transforms.outbox.route.topic.replacement=${routedByValue}",
			"transforms.outbox.table.fields.additional.placement=event_id:header:event_id,event_type:header:event_type",
		}, "\n"),
		"log4j2.properties": strings.Join([]string{
			"status = error",
			"appender.file.type = File",
			"appender.file.name = file",
			"appender.file.fileName = " + c.log,
			"appender.file.layout.type = PatternLayout",
			"appender.file.layout.pattern = [%d] %p %m (%c)%n",
			"rootLogger.level = info",
			"rootLogger.appenderRef.file.ref = file",
		}, "\n"),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body+"\n"), 0o644); err != nil {
			return nil, err
		}
	}
	c.cmd = exec.Command("java", "-Xms"+debeziumHeap, "-Xmx"+debeziumHeap, "-Dlog4j2.configurationFile="+filepath.Join(dir, "log4j2.properties"),
		"-cp", filepath.Join(lib, "*"), "org.apache.kafka.connect.cli.ConnectStandalone",
		filepath.Join(dir, "worker.properties"), filepath.Join(dir, "connector.properties"))
	out, err := os.Create(filepath.Join(dir, "stdout.log"))
	if err != nil {
		return nil, err
	}
	defer out.Close()
	c.cmd.Stdout, c.cmd.Stderr = out, out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("debezium: start Connect: %w", err)
	}
	go func() { c.cmd.Wait(); close(c.done) }()
	logf("debezium: Connect standalone (pid %d), log %s", c.cmd.Process.Pid, c.log)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var active bool
		err := s.SQL.QueryRowContext(ctx, `SELECT coalesce(bool_or(active), false) FROM pg_replication_slots WHERE slot_name = $1`, c.slot).Scan(&active)
		if err == nil && active {
			return c, nil
		}
		select {
		case <-c.done:
			return nil, fmt.Errorf("debezium: Connect exited before streaming; see %s", c.log)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stop(s)
			return nil, fmt.Errorf("debezium: not streaming its slot after 2m; see %s", c.log)
		}
	}
}

// problems returns the last warnings and errors of Connect's log, for a
// failure's message: the log goes with the bench's scratch directory.
func (c *connect) problems() string {
	b, err := os.ReadFile(c.log)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "] WARN ") || strings.Contains(l, "] ERROR ") || strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "Caused by") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}

// stop ends Connect and drops its slot and publication: a slot left
// behind holds the server's WAL.
func (c *connect) stop(s *schemaDB) {
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if _, err := s.SQL.ExecContext(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, c.slot); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := s.SQL.ExecContext(ctx, `DROP PUBLICATION IF EXISTS `+c.pub); err != nil {
		logf("debezium: drop publication: %v", err)
	}
}
