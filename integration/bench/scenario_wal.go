package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
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

	// Commit-to-ack at -latency-rate through the WAL relay.
	P50MS float64 `json:"wal_p50_ms"`
	P99MS float64 `json:"wal_p99_ms"`

	Settings map[string]any `json:"settings"`
	*delivery
}

// walTxEvents is how many events one backlog transaction commits.
const walTxEvents = 100

func runWAL(ctx context.Context, e *env) (walBench, error) {
	res := walBench{Scenario: "wal", Events: e.opts.events}
	cfg := walrelay.Config{Lanes: e.opts.lanes, MaxInFlight: 2 * max(e.opts.batch, 1000), CleanupInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	res.Settings = map[string]any{"lanes": walrelay.LanesDefault, "max_in_flight": cfg.MaxInFlight, "tx_events": walTxEvents, "retention": "0 (deleted once confirmed)"}
	if cfg.Lanes != 0 {
		res.Settings["lanes"] = cfg.Lanes
	}

	// The polling relay first, on its own schema.
	ps, err := e.newSchema(ctx, "wal_poll")
	if err != nil {
		return res, err
	}
	defer ps.close()
	if err := insertBacklog(ctx, ps, "bench.wal_poll", e.opts.events, e.opts.aggregates, "pending", 0); err != nil {
		return res, err
	}
	rr := relayRun{replicas: 1, cfg: e.relayConfig(), publisher: e.kafkaPublisher}
	m := startMeter(ctx, ps)
	start := time.Now()
	stop, err := rr.start(ctx, ps)
	if err != nil {
		return res, err
	}
	end, err := waitDrained(ctx, ps, e.opts.timeout)
	cpu, wal := m.stop(ctx)
	stop()
	if err != nil {
		return res, fmt.Errorf("wal: polling relay: %w", err)
	}
	res.RelayEPS = float64(e.opts.events) / end.Sub(start).Seconds()
	res.RelayPGUSPerEvent, res.RelayWALBytesPerEvent = perEvent(cpu, wal, e.opts.events)
	// Its prune deleting the published rows, as it would after Retention.
	m = startMeter(ctx, ps)
	prune := ps.Names.Render(outboxsql.Prune)
	args := outboxsql.PruneArgs{Retention: 0, Batch: walrelay.CleanupBatchDefault}.Args()
	for {
		r, err := ps.SQL.ExecContext(ctx, prune, args...)
		if err != nil {
			return res, fmt.Errorf("wal: prune: %w", err)
		}
		if n, _ := r.RowsAffected(); n < int64(walrelay.CleanupBatchDefault) {
			break
		}
	}
	cpu, _ = m.stop(ctx)
	res.RelayPrunePGUSPerEvent, _ = perEvent(cpu, 0, e.opts.events)

	// The WAL relay: its slot exists before the backlog is written, so the
	// backlog comes through the stream (rows written before the slot would
	// be read from the table instead).
	s, err := e.newSchema(ctx, "wal")
	if err != nil {
		return res, err
	}
	defer s.close()
	defer dropWALSlot(s)
	kafka, err := e.kafkaPublisher()
	if err != nil {
		return res, err
	}
	defer kafka.Close()
	acks := &ackRecorder{Publisher: kafka, at: map[string]time.Time{}}
	cfg.ConnString, cfg.Table, cfg.Publisher = s.URL, s.Table, acks
	r, err := walrelay.New(cfg)
	if err != nil {
		return res, err
	}
	stopRelay, err := runWALRelay(ctx, r)
	if err != nil {
		return res, err
	}
	stopRelay()
	topic := "bench.wal"
	if err := insertBacklogTx(ctx, s, topic, e.opts.events, e.opts.aggregates); err != nil {
		return res, err
	}
	// The drain, without the cleanup; then the cleanup alone.
	drainCfg := cfg
	drainCfg.CleanupInterval = time.Hour
	dr, err := walrelay.New(drainCfg)
	if err != nil {
		return res, err
	}
	m = startMeter(ctx, s)
	start = time.Now()
	if stopRelay, err = runWALRelay(ctx, dr); err != nil {
		return res, err
	}
	if err := acks.waitFor(e.opts.events, e.opts.timeout); err != nil {
		stopRelay()
		return res, fmt.Errorf("wal: %w", err)
	}
	took := time.Since(start)
	cpu, wal = m.stop(ctx)
	stopRelay()
	res.WALEPS = float64(e.opts.events) / took.Seconds()
	res.WALPGUSPerEvent, res.WALWALBytesPerEvent = perEvent(cpu, wal, e.opts.events)
	m = startMeter(ctx, s)
	if stopRelay, err = runWALRelay(ctx, r); err != nil {
		return res, err
	}
	_, err = waitDrained(ctx, s, e.opts.timeout)
	cpu, wal = m.stop(ctx)
	stopRelay()
	if err != nil {
		return res, fmt.Errorf("wal: cleanup: %w", err)
	}
	res.WALCleanupPGUSPerEvent, res.WALCleanupWALBytesPerEvent = perEvent(cpu, wal, e.opts.events)
	d, err := readBack(ctx, e.broker, topic, e.opts.events, 10*time.Second)
	if err != nil {
		return res, err
	}
	res.delivery = &d

	res.P50MS, res.P99MS, err = walLatency(ctx, e, cfg)
	return res, err
}

// runWALRelay runs r until the returned stop is called, returning once it
// streams.
func runWALRelay(ctx context.Context, r *walrelay.Relay) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
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
			return nil, fmt.Errorf("wal relay not streaming after 30s")
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
// per transaction.
func insertBacklogTx(ctx context.Context, s *schemaDB, topic string, n, aggregates int) error {
	q := s.Names.Render(insertBacklogSQL)
	for done := 0; done < n; done += walTxEvents {
		k := min(walTxEvents, n-done)
		if _, err := s.SQL.ExecContext(ctx, q, topic, k, aggregates, "pending", payloadPad, done); err != nil {
			return fmt.Errorf("write backlog: %w", err)
		}
	}
	return nil
}

// dropWALSlot drops the scenario's slot and publication once the relay is
// gone: a slot left behind holds the server's WAL.
func dropWALSlot(s *schemaDB) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	name := walrelay.SlotDefault(s.Table)
	for ctx.Err() == nil {
		if _, err := s.SQL.ExecContext(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, name); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := s.SQL.ExecContext(ctx, `DROP PUBLICATION IF EXISTS `+walrelay.PublicationDefault(s.Table)); err != nil {
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
	cfg.ConnString, cfg.Table, cfg.Publisher = s.URL, s.Table, message.Publisher(acks)
	r, err := walrelay.New(cfg)
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
	n := e.opts.latencyRate * int(e.opts.latencyDuration/time.Second)
	var (
		mu       sync.Mutex
		commits  = make(map[uuid.UUID]time.Time, n)
		failures atomic.Int64
		wg       sync.WaitGroup
		jobs     = make(chan int, n)
	)
	for range latencyWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				ev := benchEvent("bench.wal_latency", i, e.opts.aggregates)
				tx, err := s.SQL.BeginTx(ctx, nil)
				if err != nil {
					failures.Add(1)
					continue
				}
				if err := w.Write(ctx, tx, ev); err != nil {
					_ = tx.Rollback()
					failures.Add(1)
					continue
				}
				if err := tx.Commit(); err != nil {
					failures.Add(1)
					continue
				}
				at := time.Now()
				mu.Lock()
				commits[ev.ID] = at
				mu.Unlock()
			}
		}()
	}
	interval := time.Second / time.Duration(e.opts.latencyRate)
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if f := failures.Load(); f > 0 {
		return 0, 0, fmt.Errorf("wal latency: %d writes failed", f)
	}
	if err := acks.waitFor(n, 60*time.Second); err != nil {
		return 0, 0, fmt.Errorf("wal latency: %w", err)
	}
	lat := make([]float64, 0, n)
	acks.mu.Lock()
	for id, c := range commits {
		a, ok := acks.at[id.String()]
		if !ok {
			acks.mu.Unlock()
			return 0, 0, fmt.Errorf("wal latency: event %s committed but never acknowledged", id)
		}
		lat = append(lat, max(a.Sub(c), 0).Seconds()*1000)
	}
	acks.mu.Unlock()
	slices.Sort(lat)
	return quantile(lat, 0.50), quantile(lat, 0.99), nil
}

// meter measures PostgreSQL's CPU time and WAL written between start and
// stop.
type meter struct {
	s        *schemaDB
	postmast int // the server's postmaster pid, 0 if not visible here
	cpu0     time.Duration
	lsn0     string
}

func startMeter(ctx context.Context, s *schemaDB) *meter {
	m := &meter{s: s}
	var backend int
	if err := s.SQL.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err == nil {
		if st, err := procStat(backend); err == nil {
			m.postmast = st.ppid
		}
	}
	m.cpu0 = serverCPU(m.postmast)
	_ = s.SQL.QueryRowContext(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&m.lsn0)
	return m
}

// stop returns the CPU time (-1 if not measurable) and WAL bytes since
// start.
func (m *meter) stop(ctx context.Context) (cpu time.Duration, wal int64) {
	cpu = -1
	if m.postmast != 0 {
		cpu = serverCPU(m.postmast) - m.cpu0
	}
	_ = m.s.SQL.QueryRowContext(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, m.lsn0).Scan(&wal)
	return cpu, wal
}

func perEvent(cpu time.Duration, wal int64, events int) (usPerEvent, bytesPerEvent float64) {
	usPerEvent = -1
	if cpu >= 0 {
		usPerEvent = float64(cpu.Microseconds()) / float64(events)
	}
	return usPerEvent, float64(wal) / float64(events)
}

type stat struct {
	ppid                 int
	utime, stime, cutime int64
	cstime               int64
}

// procStat reads /proc/<pid>/stat.
func procStat(pid int) (stat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return stat{}, err
	}
	// The command name is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 15 {
		return stat{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	num := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	// Fields from state (index 0 here): ppid 1, utime 11, stime 12, cutime 13, cstime 14.
	return stat{ppid: int(num(1)), utime: num(11), stime: num(12), cutime: num(13), cstime: num(14)}, nil
}

// serverCPU is the CPU time of the postmaster, its live children, and the
// children it has reaped (cutime, cstime), in clock ticks of 10 ms.
func serverCPU(postmaster int) time.Duration {
	if postmaster == 0 {
		return 0
	}
	pm, err := procStat(postmaster)
	if err != nil {
		return 0
	}
	ticks := pm.utime + pm.stime + pm.cutime + pm.cstime
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == postmaster {
			continue
		}
		if st, err := procStat(pid); err == nil && st.ppid == postmaster {
			ticks += st.utime + st.stime
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
