package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox"
)

// steadyWriters is how many connections the steady scenario's writers
// commit on; their backends' CPU is left out of the drainer's.
const steadyWriters = latencyWriters

// steadyPlainPoll is how long the plain loop waits after a claim that
// found fewer rows than its batch: its poll, as the relay's LISTEN and
// PollInterval are the relay's.
const steadyPlainPoll = 50 * time.Millisecond

// steadyBench is one side of the steady scenario: events committed at a
// steady rate, one per transaction, while one drainer publishes them.
type steadyBench struct {
	Scenario string         `json:"scenario"`
	Mode     string         `json:"mode"` // relay or plain
	Rate     int            `json:"rate_per_s"`
	Events   int            `json:"events"`
	Seconds  float64        `json:"seconds"`
	Behind   int            `json:"writes_late_over_10ms"`
	Cost     *cost          `json:"cost,omitempty"`
	Settings map[string]any `json:"settings"`
}

// runSteady commits -steady-rate events a second, one per transaction,
// for -steady-duration, while the relay (every default) or the plain loop
// (polling every steadyPlainPoll when a claim comes back short) publishes
// them, and measures PostgreSQL's CPU per event from the first commit to
// the last publish, the writers' own backends left out: what draining
// costs the database while the service writes, periodic rounds, LISTEN
// and the polls that find little included.
func runSteady(ctx context.Context, e *env, plain bool) (steadyBench, error) {
	mode := "relay"
	if plain {
		mode = "plain"
	}
	s, err := e.newSchema(ctx, "steady_"+mode)
	if err != nil {
		return steadyBench{}, err
	}
	defer s.close()
	topic, err := e.topic(ctx, "bench.steady."+mode)
	if err != nil {
		return steadyBench{}, err
	}
	var pt plainTable
	if plain {
		if pt, err = newPlainTable(ctx, s); err != nil {
			return steadyBench{}, fmt.Errorf("steady: %w", err)
		}
	}
	writers, pids, err := steadyWriterPool(ctx, s.URL)
	if err != nil {
		return steadyBench{}, err
	}
	defer writers.Close()
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: s.Table})
	if err != nil {
		return steadyBench{}, err
	}
	commit := func(i int) (uuid.UUID, error) {
		ev := benchEvent(topic, i, e.opts.aggregates)
		if plain {
			_, err := writers.ExecContext(ctx, pt.render(`INSERT INTO {{plain}} (aggregate_id, payload) VALUES ($1, $2)`), ev.AggregateID, string(ev.Payload))
			return ev.ID, err
		}
		tx, err := writers.BeginTx(ctx, nil)
		if err != nil {
			return ev.ID, err
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after the commit
		if err := w.Write(ctx, tx, ev); err != nil {
			return ev.ID, err
		}
		return ev.ID, tx.Commit()
	}

	p, err := newPoller(ctx, s)
	if err != nil {
		return steadyBench{}, err
	}
	defer p.close()
	n := e.opts.steadyRate * int(e.opts.steadyDuration/time.Second)
	cfg := e.relayConfig()
	var (
		stopDrainer func() error
		published   func(context.Context) (int64, error)
	)
	if plain {
		pub, err := e.loopPublisher()
		if err != nil {
			return steadyBench{}, err
		}
		defer pub.Close()
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		total := make(chan int, 1)
		go func() {
			k, err := plainLoop(runCtx, pt, pub, topic, time.Now().Add(e.opts.timeout+e.opts.steadyDuration), steadyPlainPoll)
			total <- k
			done <- err
		}()
		stopDrainer = func() error { cancel(); <-total; return <-done }
		published = func(ctx context.Context) (int64, error) {
			var k int64
			err := p.conn.QueryRowContext(ctx, pt.render(`SELECT count(*) FROM {{plain}} WHERE status = 'published'`)).Scan(&k)
			return k, err
		}
	} else {
		rr := relayRun{replicas: 1, cfg: cfg, publisher: func() (message.Publisher, error) { return e.kafkaPublisher() }}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- rr.runUntil(runCtx, s) }()
		stopDrainer = func() error { cancel(); return <-done }
		published = func(ctx context.Context) (int64, error) {
			var k int64
			err := p.conn.QueryRowContext(ctx, s.Names.Render(`SELECT count(*) FROM {{table}} WHERE state = 'published'`)).Scan(&k)
			return k, err
		}
	}
	defer func() {
		if stopDrainer != nil {
			_ = stopDrainer()
		}
	}()
	time.Sleep(time.Second) // the drainer's start-up (the relay's first heartbeat takes its shards) is not the steady state

	m := e.startMeter(ctx, s.SQL).exclude(p.pid)
	for _, pid := range pids {
		m.exclude(pid)
	}
	start := time.Now()
	_, behind, err := paceCommits(e.opts.steadyRate, n, commit)
	if err != nil {
		return steadyBench{}, fmt.Errorf("steady %s: %w", mode, err)
	}
	deadline := time.Now().Add(e.opts.timeout)
	for {
		k, err := published(ctx)
		if err != nil {
			return steadyBench{}, fmt.Errorf("steady %s: count published: %w", mode, err)
		}
		if k >= int64(n) {
			break
		}
		if time.Now().After(deadline) {
			return steadyBench{}, fmt.Errorf("steady %s: %d of %d events published after %s", mode, k, n, e.opts.timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(start)
	c := m.stop(ctx, n)
	err = stopDrainer()
	stopDrainer = nil
	if err != nil {
		return steadyBench{}, fmt.Errorf("steady %s: %w", mode, err)
	}
	settings := map[string]any{"writers": steadyWriters, "events_per_commit": 1}
	if plain {
		settings["poll"] = steadyPlainPoll.String()
		settings["batch"], settings["lanes"] = plainBatch, plainLanes
	} else {
		for k, v := range relaySettings(cfg, 1) {
			settings[k] = v
		}
	}
	return steadyBench{Scenario: "steady", Mode: mode, Rate: e.opts.steadyRate, Events: n, Seconds: took.Seconds(), Behind: behind,
		Cost: c, Settings: e.producerSettings(settings)}, nil
}

// steadyWriterPool opens steadyWriters connections to url and returns the
// pool holding them and their backends' pids.
func steadyWriterPool(ctx context.Context, url string) (*sql.DB, []int, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, nil, err
	}
	db.SetMaxOpenConns(steadyWriters)
	db.SetMaxIdleConns(steadyWriters)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	conns := make([]*sql.Conn, 0, steadyWriters)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var pids []int
	for range steadyWriters {
		c, err := db.Conn(ctx)
		if err != nil {
			db.Close()
			return nil, nil, fmt.Errorf("steady: writer connection: %w", err)
		}
		conns = append(conns, c)
		var pid int
		if err := c.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			db.Close()
			return nil, nil, fmt.Errorf("steady: writer connection: %w", err)
		}
		pids = append(pids, pid)
	}
	return db, pids, nil
}
