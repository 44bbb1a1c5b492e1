package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/relay/walrelay"
)

// walBench is the WAL relay (relay/walrelay) beside the polling relay, on
// the same backlog, one after the other: drain throughput, PostgreSQL CPU
// and WAL written per event, and commit-to-ack latency at -latency-rate.
type walBench struct {
	Scenario string `json:"scenario"`
	Events   int    `json:"events"`

	WALEPS   float64 `json:"wal_eps"`
	RelayEPS float64 `json:"relay_eps"`

	// PostgreSQL CPU (every process of the server: backends, the
	// walsender, WAL writer, checkpointer, autovacuum) per event while
	// each drains; -1 when the server's processes are not visible here.
	// Neither includes deleting the rows afterwards (the polling relay's
	// prune, the WAL relay's cleanup), which both modes do once per row:
	// the WAL relay's cleanup is measured on its own.
	WALPGUSPerEvent        float64 `json:"wal_pg_us_per_event"`
	RelayPGUSPerEvent      float64 `json:"relay_pg_us_per_event"`
	WALCleanupPGUSPerEvent float64 `json:"wal_cleanup_pg_us_per_event"`
	// RelayPrunePGUSPerEvent is the polling relay's prune statement
	// deleting the same rows, for comparison with the WAL relay's cleanup.
	RelayPrunePGUSPerEvent float64 `json:"relay_prune_pg_us_per_event"`

	// WAL written per event while each drains (pg_current_wal_lsn), and
	// by the WAL relay's cleanup.
	WALWALBytesPerEvent        float64 `json:"wal_wal_bytes_per_event"`
	RelayWALBytesPerEvent      float64 `json:"relay_wal_bytes_per_event"`
	WALCleanupWALBytesPerEvent float64 `json:"wal_cleanup_wal_bytes_per_event"`

	// Every part of each drain's CPU (relay process, PostgreSQL, broker)
	// and WAL, per event.
	WALCost   *cost `json:"wal_cost,omitempty"`
	RelayCost *cost `json:"relay_cost,omitempty"`

	// Commit-to-ack at -latency-rate through the WAL relay.
	P50MS float64 `json:"wal_p50_ms"`
	P99MS float64 `json:"wal_p99_ms"`

	Settings map[string]any `json:"settings"`
	// Rounds are the drains the figures above are the medians of.
	Rounds []walRound `json:"rounds"`
	*delivery
}

// walTxEvents is how many events one backlog transaction commits.
const walTxEvents = 100

func runWAL(ctx context.Context, e *env) (walBench, error) {
	res := walBench{Scenario: "wal", Events: e.opts.events}
	cfg := walrelay.Config{Lanes: e.opts.lanes, LaneBatch: e.opts.laneBatch, MaxInFlight: 2 * max(e.opts.batch, 1000), CleanupInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	res.Settings = map[string]any{"lanes": walrelay.LanesDefault, "lane_batch": walrelay.LaneBatchDefault, "max_in_flight": cfg.MaxInFlight, "tx_events": walTxEvents,
		"retention": "0 (deleted once confirmed)", "rounds": e.opts.rounds}
	if cfg.Lanes != 0 {
		res.Settings["lanes"] = cfg.Lanes
	}
	if cfg.LaneBatch != 0 {
		res.Settings["lane_batch"] = cfg.LaneBatch
	}
	// The two drains in interleaved rounds (see runRelayRounds), each on a
	// backlog of its own; the deletes after them in the first round only.
	for round := range e.opts.rounds {
		rd := walRound{Round: round}
		poll := func() error { return walPollingDrain(ctx, e, &rd, &res, round == 0) }
		stream := func() error { return walStreamDrain(ctx, e, cfg, &rd, &res, round == 0) }
		first, second := poll, stream
		if round%2 == 1 {
			first, second = second, first
		}
		if err := first(); err != nil {
			return res, err
		}
		if err := second(); err != nil {
			return res, err
		}
		res.Rounds = append(res.Rounds, rd)
		res.delivery = res.delivery.plus(rd.delivery)
	}
	res.takeMedians()
	var err error
	res.P50MS, res.P99MS, err = walLatency(ctx, e, cfg)
	return res, err
}

// walRound is one round of the wal scenario: a drain by each relay. Its
// PostgreSQL CPU and WAL figures are in the costs.
type walRound struct {
	Round        int     `json:"round"`
	WALEPS       float64 `json:"wal_eps"`
	RelayEPS     float64 `json:"relay_eps"`
	WALSeconds   float64 `json:"wal_seconds"`
	RelaySeconds float64 `json:"relay_seconds"`
	WALCost      *cost   `json:"wal_cost,omitempty"`
	RelayCost    *cost   `json:"relay_cost,omitempty"`
	*delivery            // of the WAL relay's drain
}

// takeMedians sets the scenario's figures to the medians of its rounds:
// events/s, and each cost figure (see medianCost), which the PostgreSQL
// CPU and WAL figures are read from.
func (res *walBench) takeMedians() {
	var (
		walEPS, relayEPS []float64
		wal, relay       []*cost
	)
	for _, rd := range res.Rounds {
		walEPS, relayEPS = append(walEPS, rd.WALEPS), append(relayEPS, rd.RelayEPS)
		wal, relay = append(wal, rd.WALCost), append(relay, rd.RelayCost)
	}
	res.WALEPS, res.RelayEPS = median(walEPS), median(relayEPS)
	res.WALCost, res.RelayCost = medianCost(wal), medianCost(relay)
	res.WALPGUSPerEvent, res.WALWALBytesPerEvent = measured(res.WALCost, pgUS), measured(res.WALCost, walBytes)
	res.RelayPGUSPerEvent, res.RelayWALBytesPerEvent = measured(res.RelayCost, pgUS), measured(res.RelayCost, walBytes)
}

// walPollingDrain drains a backlog with the polling relay into rd, and
// with prune measures its prune deleting the published rows, as it would
// after Retention, into res.
func walPollingDrain(ctx context.Context, e *env, rd *walRound, res *walBench, prune bool) error {
	logf("wal: polling relay, round %d", rd.Round)
	ps, err := e.newSchema(ctx, "wal_poll")
	if err != nil {
		return err
	}
	defer ps.close()
	topic, err := e.topic(ctx, "bench.wal_poll")
	if err != nil {
		return err
	}
	if err := insertBacklog(ctx, ps, topic, e.opts.events, e.opts.aggregates, "pending", 0); err != nil {
		return err
	}
	rr := relayRun{replicas: 1, cfg: e.relayConfig(), publisher: e.kafkaPublisher}
	p, err := newPoller(ctx, ps)
	if err != nil {
		return err
	}
	defer p.close()
	m := e.startMeter(ctx, ps.SQL).exclude(p.pid)
	start := time.Now()
	stop, err := rr.start(ctx, ps)
	if err != nil {
		return err
	}
	end, err := p.waitDrained(ctx, e.opts.timeout)
	c := m.stop(ctx, e.opts.events)
	stop()
	if err != nil {
		return fmt.Errorf("wal: polling relay: %w", err)
	}
	rd.RelaySeconds = end.Sub(start).Seconds()
	rd.RelayEPS = float64(e.opts.events) / rd.RelaySeconds
	rd.RelayCost = c
	if !prune {
		return nil
	}
	m = e.startMeter(ctx, ps.SQL)
	q := ps.Names.Render(outboxsql.Prune)
	args := outboxsql.PruneArgs{Retention: 0, Batch: walrelay.CleanupBatchDefault}.Args()
	for {
		r, err := ps.SQL.ExecContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("wal: prune: %w", err)
		}
		if n, _ := r.RowsAffected(); n < int64(walrelay.CleanupBatchDefault) {
			break
		}
	}
	res.RelayPrunePGUSPerEvent = measured(m.stop(ctx, e.opts.events), pgUS)
	return nil
}

// walStreamDrain drains a backlog with the WAL relay into rd and reads its
// topic back; with cleanup it then measures the relay's cleanup deleting
// the rows, into res.
func walStreamDrain(ctx context.Context, e *env, cfg walrelay.Config, rd *walRound, res *walBench, cleanup bool) error {
	logf("wal: WAL relay, round %d", rd.Round)
	// Its slot exists before the backlog is written, so the backlog comes
	// through the stream (rows written before the slot would be read from
	// the table instead).
	s, err := e.newSchema(ctx, "wal")
	if err != nil {
		return err
	}
	defer s.close()
	defer dropWALSlot(s)
	kafka, err := e.kafkaPublisher()
	if err != nil {
		return err
	}
	defer kafka.Close()
	// A counter, as the polling relay's drain has: recording each
	// message's time (ackRecorder, for latency) cost the WAL relay's drain
	// about a twentieth of its CPU.
	var acked atomic.Int64
	cfg.Table = s.Table
	pub := ackCounter{Publisher: kafka, n: &acked}
	r, err := walrelay.New(s.URL, pub, cfg)
	if err != nil {
		return err
	}
	stopRelay, err := runWALRelay(ctx, r)
	if err != nil {
		return err
	}
	stopRelay()
	topic, err := e.topic(ctx, fmt.Sprintf("bench.wal.%d", rd.Round))
	if err != nil {
		return err
	}
	if err := insertBacklogTx(ctx, s, topic, e.opts.events, e.opts.aggregates); err != nil {
		return err
	}
	// The drain, without the cleanup; then the cleanup alone.
	drainCfg := cfg
	drainCfg.CleanupInterval = time.Hour
	dr, err := walrelay.New(s.URL, pub, drainCfg)
	if err != nil {
		return err
	}
	m := e.startMeter(ctx, s.SQL)
	start := time.Now()
	if stopRelay, err = runWALRelay(ctx, dr); err != nil {
		return err
	}
	for deadline := start.Add(e.opts.timeout); acked.Load() < int64(e.opts.events); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			inc := &incompleteError{Published: acked.Load(), Backlog: int64(e.opts.events), Elapsed: time.Since(start), Err: ctx.Err()}
			stopRelay()
			return fmt.Errorf("wal: WAL relay: %w", inc)
		}
	}
	took := time.Since(start)
	c := m.stop(ctx, e.opts.events)
	stopRelay()
	rd.WALSeconds = took.Seconds()
	rd.WALEPS = float64(e.opts.events) / rd.WALSeconds
	rd.WALCost = c
	if cleanup {
		m = e.startMeter(ctx, s.SQL)
		if stopRelay, err = runWALRelay(ctx, r); err != nil {
			return err
		}
		_, err = waitDrained(ctx, s, e.opts.timeout)
		c = m.stop(ctx, e.opts.events)
		stopRelay()
		if err != nil {
			return fmt.Errorf("wal: cleanup: %w", err)
		}
		res.WALCleanupPGUSPerEvent, res.WALCleanupWALBytesPerEvent = measured(c, pgUS), measured(c, walBytes)
	}
	d, err := readBack(ctx, e.brokers, topic, e.opts.events, 10*time.Second)
	if err != nil {
		return err
	}
	rd.delivery = &d
	return nil
}

// walStartTimeout bounds the wait for a WAL relay to stream.
const walStartTimeout = 90 * time.Second

// runWALRelay runs r until the returned stop is called, returning once it
// streams. Creating its slot waits for every transaction open on the
// server to end, so another process's long transaction (a relay of the
// crash suite stopped with SIGSTOP in one, in CI) delays the start.
func runWALRelay(ctx context.Context, r *walrelay.Relay) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(walStartTimeout)
	for !r.Active() {
		select {
		case err := <-done:
			cancel()
			return nil, fmt.Errorf("wal relay: %w", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			return nil, fmt.Errorf("wal relay not streaming after %s", walStartTimeout)
		}
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			logf("wal relay: %v", err)
		}
	}, nil
}

// insertBacklogTx writes n events as the application would: walTxEvents
// per transaction. Then, as insertBacklog does for the polling relay's
// backlog, it vacuums and analyzes the table, so autovacuum does not start
// on the fresh rows inside one drain and not the other.
func insertBacklogTx(ctx context.Context, s *schemaDB, topic string, n, aggregates int) error {
	checkpoint(ctx, s.SQL)
	q := s.Names.Render(insertBacklogSQL)
	for done := 0; done < n; done += walTxEvents {
		k := min(walTxEvents, n-done)
		if _, err := s.SQL.ExecContext(ctx, q, topic, k, aggregates, "pending", payloadPad, done); err != nil {
			return fmt.Errorf("write backlog: %w", err)
		}
	}
	if _, err := s.SQL.ExecContext(ctx, "VACUUM ANALYZE "+s.Names.Table); err != nil {
		return fmt.Errorf("analyze backlog: %w", err)
	}
	return nil
}

// dropWALSlot drops the scenario's slot and publication once the relay is
// gone: a slot left behind holds the server's WAL.
func dropWALSlot(s *schemaDB) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	name := walrelay.SlotDefault(s.ts.Database(), s.Table)
	for ctx.Err() == nil {
		if _, err := s.SQL.ExecContext(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE slot_name = $1 AND database = current_database()`, name); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := s.SQL.ExecContext(ctx, `DROP PUBLICATION IF EXISTS `+walrelay.PublicationDefault(s.ts.Database(), s.Table)); err != nil {
		logf("drop publication: %v", err)
	}
}

// walLatency commits events at -latency-rate through the Writer for
// -latency-duration with the WAL relay streaming, and returns the p50 and
// p99 of commit-to-ack.
func walLatency(ctx context.Context, e *env, cfg walrelay.Config) (p50, p99 float64, err error) {
	s, err := e.newSchema(ctx, "wal_latency")
	if err != nil {
		return 0, 0, err
	}
	defer s.close()
	defer dropWALSlot(s)
	kafka, err := e.kafkaPublisher()
	if err != nil {
		return 0, 0, err
	}
	defer kafka.Close()
	acks := &ackRecorder{Publisher: kafka, at: map[string]time.Time{}}
	cfg.Table = s.Table
	r, err := walrelay.New(s.URL, acks, cfg)
	if err != nil {
		return 0, 0, err
	}
	stop, err := runWALRelay(ctx, r)
	if err != nil {
		return 0, 0, err
	}
	defer stop()
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: s.Table, DisableNotify: true})
	if err != nil {
		return 0, 0, err
	}
	// Warm up for a second at the same rate, as a system that has been
	// running is: the writers' connections are open, the topic exists,
	// the producer has its metadata and producer id. Without it the first
	// second pays for all of that once, which is 10% of a 10-second run
	// and all of its p99.
	topic, err := e.topic(ctx, "bench.wal_latency")
	if err != nil {
		return 0, 0, err
	}
	commits, err := commitPaced(ctx, s, w, topic, e.opts.latencyRate, e.opts.latencyRate, 1_000_000_000, e.opts.aggregates)
	if err != nil {
		return 0, 0, fmt.Errorf("wal latency: warm-up: %w", err)
	}
	if err := acks.waitFor(len(commits), 30*time.Second); err != nil {
		return 0, 0, fmt.Errorf("wal latency: warm-up: %w", err)
	}
	acks.mu.Lock()
	clear(acks.at)
	acks.mu.Unlock()
	n := e.opts.latencyRate * int(e.opts.latencyDuration/time.Second)
	if commits, err = commitPaced(ctx, s, w, topic, e.opts.latencyRate, n, 0, e.opts.aggregates); err != nil {
		return 0, 0, fmt.Errorf("wal latency: %w", err)
	}
	if err := acks.waitFor(n, 60*time.Second); err != nil {
		return 0, 0, fmt.Errorf("wal latency: %w", err)
	}
	lat, err := acks.latencies(commits)
	if err != nil {
		return 0, 0, fmt.Errorf("wal latency: %w", err)
	}
	return quantile(lat, 0.50), quantile(lat, 0.99), nil
}

// commitPaced commits n events of topic (numbered from base) through w,
// each alone in its transaction, paced at rate per second (paceCommits),
// and returns each one's commit time.
func commitPaced(ctx context.Context, s *schemaDB, w *txoutbox.Writer, topic string, rate, n, base, aggregates int) (map[uuid.UUID]time.Time, error) {
	commits, _, err := paceCommits(rate, n, func(i int) (uuid.UUID, error) {
		ev := benchEvent(topic, base+i, aggregates)
		return ev.ID, commitEvent(ctx, s, w, ev)
	})
	return commits, err
}

// commitEvent commits ev alone through w.
func commitEvent(ctx context.Context, s *schemaDB, w *txoutbox.Writer, ev txoutbox.Event) error {
	tx, err := s.SQL.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := w.Write(ctx, tx, ev); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// measured is a cost figure, -1 when it could not be read (the JSON line
// cannot carry NaN).
func measured(c *cost, pick func(*cost) *float64) float64 {
	if v := figure(c, pick); !math.IsNaN(v) {
		return v
	}
	return -1
}
