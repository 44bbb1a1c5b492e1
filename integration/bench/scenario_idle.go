package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/relay"
)

// idleCost is what relays with nothing to publish cost PostgreSQL: their
// periodic rounds alone (heartbeats, shard balance, claim floor, stats,
// repair, the claims that find nothing).
type idleCost struct {
	Scenario string `json:"scenario"`
	Relays   int    `json:"relays"`
	Tables   int    `json:"tables"`
	// Seconds is how long it was measured, after the relays' start-up.
	Seconds float64 `json:"seconds"`
	// PGCPUMSPerS is the PostgreSQL cluster's CPU per second, less what it
	// used per second idle before the relays started.
	PGCPUMSPerS float64 `json:"pg_cpu_ms_per_s"`
	// StatementsPerS counts the relays' statements per second (-statements).
	StatementsPerS float64    `json:"statements_per_s,omitempty"`
	Statements     []stmtStat `json:"statements,omitempty"`
}

// idleMaxConns is each idle relay's pool bound: `outbox relay --schemas`'
// default --max-conns, with as many kept idle, as it keeps them.
const idleMaxConns = 40

// idleShapes are the relays and tables the idle scenario measures.
var idleShapes = []struct{ relays, tables int }{{1, 1}, {3, 1}, {1, 100}, {3, 100}}

// runIdle measures, for each shape, relays (one relay.Group per replica
// over every table, the way `outbox relay --schemas` runs) on empty
// outboxes for -idle-duration, after a start-up they are given to settle.
func runIdle(ctx context.Context, e *env, emit func(any) error) ([]idleCost, error) {
	if e.postmaster == 0 {
		return nil, fmt.Errorf("idle: PostgreSQL is not on this host: its CPU cannot be measured")
	}
	var out []idleCost
	for _, shape := range idleShapes {
		logf("scenario idle: %d relays over %d tables", shape.relays, shape.tables)
		c, err := runIdleShape(ctx, e, shape.relays, shape.tables)
		if err != nil {
			return out, err
		}
		out = append(out, c)
		if err := emit(c); err != nil {
			return out, err
		}
	}
	return out, nil
}

func runIdleShape(ctx context.Context, e *env, replicas, tables int) (idleCost, error) {
	var schemas []*schemaDB
	defer func() {
		for _, s := range schemas {
			s.close()
		}
	}()
	names := make([]string, 0, tables)
	for range tables {
		s, err := e.newSchema(ctx, "idle")
		if err != nil {
			return idleCost{}, err
		}
		schemas = append(schemas, s)
		names = append(names, s.Schema)
	}
	db := schemas[0].SQL
	base, err := e.idleCluster(2 * time.Second)
	if err != nil {
		return idleCost{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	var (
		wg    sync.WaitGroup
		pools []*sql.DB
	)
	defer func() {
		cancel()
		wg.Wait()
		for _, p := range pools {
			p.Close()
		}
	}()
	for i := range replicas {
		// Each replica on a pool of its own, bounded and kept as `outbox
		// relay --schemas` bounds and keeps its: three relays on one
		// unbounded pool ran the server out of connections at their start.
		pool, err := sql.Open("pgx", schemas[0].URL)
		if err != nil {
			return idleCost{}, fmt.Errorf("idle: %w", err)
		}
		pools = append(pools, pool)
		pool.SetMaxOpenConns(idleMaxConns)
		pool.SetMaxIdleConns(idleMaxConns)
		cfg := relay.GroupConfig{Relay: relay.Config{ID: fmt.Sprintf("idle-%d", i),
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}, Schemas: names}
		g, err := relay.NewGroup(pool, message.Publisher(kafkatest.NopPublisher{}), cfg)
		if err != nil {
			return idleCost{}, fmt.Errorf("idle: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.Run(runCtx); err != nil && runCtx.Err() == nil {
				logf("idle relay: %v", err)
			}
		}()
	}
	// Start-up (registration, checks, the first discovery and balance)
	// is not an idle cost.
	select {
	case <-time.After(e.opts.idleSettle):
	case <-ctx.Done():
		return idleCost{}, ctx.Err()
	}
	stmts := e.opts.statements
	if stmts {
		if err := statementsReset(ctx, db); err != nil {
			logf("%v", err)
			stmts = false
		}
	}
	cpu0, err := clusterCPU(e.postmaster)
	if err != nil {
		return idleCost{}, err
	}
	start := time.Now()
	select {
	case <-time.After(e.opts.idleDuration):
	case <-ctx.Done():
		return idleCost{}, ctx.Err()
	}
	cpu1, err := clusterCPU(e.postmaster)
	if err != nil {
		return idleCost{}, err
	}
	secs := time.Since(start).Seconds()
	c := idleCost{Scenario: "idle", Relays: replicas, Tables: tables, Seconds: math.Round(secs*10) / 10,
		PGCPUMSPerS: math.Round((float64((cpu1-cpu0).Microseconds())/secs-base)/10) / 100}
	if stmts {
		if c.Statements, err = statementsRead(ctx, db); err != nil {
			return idleCost{}, err
		}
		var calls int64
		for _, s := range c.Statements {
			calls += s.Calls
		}
		c.StatementsPerS = math.Round(float64(calls)/secs*10) / 10
		logf("statements of %d idle relays over %d tables, per second: calls plans exec_ms plan_ms | query", replicas, tables)
		for _, s := range c.Statements {
			logf("  %7.2f %7.2f %7.3f %7.3f | %s", float64(s.Calls)/secs, float64(s.Plans)/secs, s.ExecMS/secs, s.PlanMS/secs, shortQuery(s.Query))
		}
	}
	logf("idle: %d relays over %d tables cost PostgreSQL %.2f ms CPU per second", replicas, tables, c.PGCPUMSPerS)
	return c, nil
}
