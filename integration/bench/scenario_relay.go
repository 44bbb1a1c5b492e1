package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/relay"
)

// throughput is the result of a scenario that drains a backlog.
type throughput struct {
	Scenario string         `json:"scenario"`
	Events   int            `json:"events"`
	Seconds  float64        `json:"seconds"`
	EPS      float64        `json:"eps"`
	Settings map[string]any `json:"settings"`
	// SQL sums the relay's statements by kind, where they were recorded.
	SQL map[string]sqlStat `json:"sql,omitempty"`
	// Cost is the drain's CPU and WAL per event (see cpu.go).
	Cost *cost `json:"cost,omitempty"`
	*delivery
}

func newThroughput(scenario string, events int, d time.Duration, settings map[string]any) throughput {
	return throughput{Scenario: scenario, Events: events, Seconds: d.Seconds(), EPS: float64(events) / d.Seconds(), Settings: settings}
}

// relayConfig is the relay configuration the throughput scenarios use: the
// defaults, unless flags override batch size or lanes.
func (e *env) relayConfig() relay.Config {
	return relay.Config{BatchSize: e.opts.batch, Lanes: e.opts.lanes, LaneBatch: e.opts.laneBatch}
}

// relaySettings describes cfg for the JSON output, with defaults resolved.
func relaySettings(cfg relay.Config, replicas int) map[string]any {
	batch, lanes, laneBatch := cfg.BatchSize, cfg.Lanes, cfg.LaneBatch
	if batch == 0 {
		batch = relay.BatchSizeDefault
	}
	if lanes == 0 {
		lanes = relay.LanesDefault
	}
	if laneBatch == 0 {
		laneBatch = relay.LaneBatchDefault
	}
	inflight := cfg.MaxInFlight
	if inflight == 0 {
		inflight = 2 * batch
	}
	return map[string]any{"replicas": replicas, "batch": batch, "lanes": lanes, "lane_batch": laneBatch, "max_in_flight": inflight, "listen": !cfg.DisableListen}
}

// runRelayScenario drains the backlog with replicas in-process relays
// publishing to the broker, and reads the topic back.
func runRelayScenario(ctx context.Context, e *env, replicas int, cpuprofile string) (throughput, error) {
	name := fmt.Sprintf("relay%d", replicas)
	s, err := e.newSchema(ctx, name)
	if err != nil {
		return throughput{}, err
	}
	defer s.close()
	topic := "bench." + name
	if err := insertBacklog(ctx, s, topic, e.opts.events, e.opts.aggregates, "pending", 0); err != nil {
		return throughput{}, err
	}
	rr := relayRun{replicas: replicas, cfg: e.relayConfig(), publisher: e.kafkaPublisher, cpuprofile: cpuprofile, stats: e.sqlStats(s)}
	took, c, err := e.meteredDrain(ctx, &rr, s)
	if err != nil {
		return throughput{}, fmt.Errorf("%s: %w", name, err)
	}
	res := newThroughput("relay", e.opts.events, took, e.producerSettings(relaySettings(rr.cfg, replicas)))
	res.Cost = c
	if rr.stats != nil {
		res.SQL = rr.stats.snapshot()
	}
	return e.withDelivery(ctx, res, topic)
}

// runDBLimit drains the backlog with the relay and a publisher that
// acknowledges at once, batch 1000: the claim/mark cycle alone.
func runDBLimit(ctx context.Context, e *env) (throughput, error) {
	s, err := e.newSchema(ctx, "dblimit")
	if err != nil {
		return throughput{}, err
	}
	defer s.close()
	if err := insertBacklog(ctx, s, "bench.dblimit", e.opts.events, e.opts.aggregates, "pending", 0); err != nil {
		return throughput{}, err
	}
	cfg := relay.Config{BatchSize: 1000}
	rr := relayRun{replicas: 1, cfg: cfg, publisher: func() (message.Publisher, error) { return kafkatest.NopPublisher{}, nil }, stats: e.sqlStats(s)}
	took, c, err := e.meteredDrain(ctx, &rr, s)
	if err != nil {
		return throughput{}, fmt.Errorf("dblimit: %w", err)
	}
	settings := relaySettings(cfg, 1)
	settings["publisher"] = "no-op"
	res := newThroughput("dblimit", e.opts.events, took, settings)
	res.Cost = c
	if rr.stats != nil {
		res.SQL = rr.stats.snapshot()
	}
	return res, nil
}

// sqlStats returns a statement recorder for the relays of s when -sql-stats
// asks for one. It is off by default: the recording pool does not hand the
// relay a *stdlib.Conn, so the relay polls instead of LISTENing.
func (e *env) sqlStats(s *schemaDB) *sqlStats {
	if !e.opts.sqlStats {
		return nil
	}
	return newSQLStats(s.Names)
}
