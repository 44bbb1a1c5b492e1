package main

import (
	"cmp"
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
	// Round numbers the drains of a scenario that runs in rounds, from 0.
	Round int `json:"round"`
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

// relaySettings is relaySettings for a relay on s: on MySQL it polls,
// every PollIntervalMySQLDefault unless cfg says.
func (s *schemaDB) relaySettings(cfg relay.Config, replicas int) map[string]any {
	settings := relaySettings(cfg, replicas)
	if s.mysql {
		settings["listen"] = false
		settings["poll_interval"] = cmp.Or(cfg.PollInterval, relay.PollIntervalMySQLDefault).String()
	}
	return settings
}

// runRelayRounds drains the backlog -rounds times with one relay and, with
// plain, as often with the plain loop, interleaved: the relay first in even
// rounds, the plain loop first in odd ones, so that a machine whose speed
// drifts during the run (this 2-core one moves by a fifth between
// minutes) weighs on both alike. It emits each drain's result. The CPU
// profile, if asked for, is of the first relay drain.
//
// With -scheduled, each round also drains the same backlog beside that many
// rows scheduled a week ahead, right after the relay's own drain: the pair
// shows what the scheduled rows cost the relay (scheds).
func runRelayRounds(ctx context.Context, e *env, cpuprofile string, plain bool, emit func(any) error) (relays, plains, scheds []throughput, err error) {
	for round := range e.opts.rounds {
		drainRelay := func() error {
			r, err := runRelayScenario(ctx, e, 1, round, cpuprofile, 0)
			cpuprofile = ""
			if err != nil {
				return err
			}
			relays = append(relays, r)
			if err := emit(r); err != nil {
				return err
			}
			if e.opts.scheduled == 0 {
				return nil
			}
			r, err = runRelayScenario(ctx, e, 1, round, "", e.opts.scheduled)
			if err != nil {
				return err
			}
			scheds = append(scheds, r)
			return emit(r)
		}
		drainPlain := func() error {
			if !plain {
				return nil
			}
			logf("scenario plain, round %d", round)
			r, err := runPlain(ctx, e, round)
			if err != nil {
				return fmt.Errorf("plain: %w", err)
			}
			plains = append(plains, r)
			return emit(r)
		}
		first, second := drainRelay, drainPlain
		if round%2 == 1 {
			first, second = second, first
		}
		if err := first(); err != nil {
			return nil, nil, nil, err
		}
		if err := second(); err != nil {
			return nil, nil, nil, err
		}
	}
	return relays, plains, scheds, nil
}

// medianDrain returns the median events/s and cost of drains (see
// medianCost).
func medianDrain(drains []throughput) (eps float64, c *cost) {
	epss := make([]float64, len(drains))
	costs := make([]*cost, len(drains))
	for i, d := range drains {
		epss[i], costs[i] = d.EPS, d.Cost
	}
	return median(epss), medianCost(costs)
}

// medianCost is the median of each figure of costs, over those that have
// it: each figure's own median, so the figures need not come from one
// drain, and with an even number the mean of the middle two.
func medianCost(costs []*cost) *cost {
	pick := func(g func(*cost) *float64) *float64 {
		var v []float64
		for _, c := range costs {
			if c != nil && g(c) != nil {
				v = append(v, *g(c))
			}
		}
		if len(v) == 0 {
			return nil
		}
		m := median(v)
		return &m
	}
	return &cost{
		RelayUS:  pick(func(c *cost) *float64 { return c.RelayUS }),
		PGUS:     pick(pgUS),
		MySQLdUS: pick(mysqldUS),
		BrokerUS: pick(func(c *cost) *float64 { return c.BrokerUS }),
		TotalUS:  pick(totalUS),
		WALBytes: pick(walBytes),
	}
}

// runRelayScenario drains the backlog with replicas in-process relays
// publishing to the broker, and reads the topic back. round numbers the
// drain among several of the same scenario. scheduled rows a week ahead
// are written first, beside the backlog (the scenario is then
// "relay_scheduled").
func runRelayScenario(ctx context.Context, e *env, replicas, round int, cpuprofile string, scheduled int) (throughput, error) {
	name := fmt.Sprintf("relay%d", replicas)
	if scheduled > 0 {
		name += "_scheduled"
	}
	s, err := e.newSchema(ctx, name)
	if err != nil {
		return throughput{}, err
	}
	defer s.close()
	topic, err := e.topic(ctx, fmt.Sprintf("bench.%s.%d", name, round))
	if err != nil {
		return throughput{}, err
	}
	if err := insertScheduled(ctx, s, topic, scheduled); err != nil {
		return throughput{}, err
	}
	if err := insertBacklog(ctx, s, topic, e.opts.events, e.opts.aggregates, "pending", 0); err != nil {
		return throughput{}, err
	}
	rr := relayRun{replicas: replicas, cfg: e.relayConfig(), publisher: e.kafkaPublisher, cpuprofile: cpuprofile, stats: e.sqlStats(s)}
	took, c, err := e.meteredDrain(ctx, &rr, s)
	if err != nil {
		return throughput{}, fmt.Errorf("%s: %w", name, err)
	}
	scenario := "relay"
	settings := e.producerSettings(s.relaySettings(rr.cfg, replicas))
	if scheduled > 0 {
		scenario, settings["scheduled"] = "relay_scheduled", scheduled
	}
	res := newThroughput(scenario, e.opts.events, took, settings)
	res.Cost, res.Round = c, round
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
	settings := s.relaySettings(cfg, 1)
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
