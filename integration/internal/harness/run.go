package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// World is a running scenario, handed to its fault.
type World struct {
	Env     *Env
	Broker  *Broker
	Fleet   *Fleet
	Writers *Writers
	Flags   RelayFlags
	// CommitRank, in WAL mode, is each committed row's position in commit
	// order (set before Check runs).
	CommitRank map[int64]int64
	// Tally counts the faults injected and the operators' work.
	Tally *Tally

	large  *largeStore // with Plan.Large
	topics []string    // the topics the verifier reads besides the writers'
}

// Plan describes a scenario.
type Plan struct {
	Name   string
	Broker BrokerConfig
	Relays int // started before the writers
	// FixedIDs starts the relays as relay-0, relay-1, ... (a StatefulSet)
	// instead of fresh ids.
	FixedIDs bool
	// ProxyDB gives every relay its own Proxy to PostgreSQL (partitions).
	ProxyDB bool
	// OwnCluster runs the scenario on a PostgreSQL cluster of its own,
	// which the runner must set up (Env.Cluster, and Env.DB on it): the
	// scenario crashes it.
	OwnCluster bool
	// Alone: the scenario runs with no other scenario beside it (the
	// runner's lanes wait), since what it judges depends on the load.
	Alone bool
	// ExtraTopics are read back by the verifier besides the writers' and
	// the broker's seeded topics (topics created during the run).
	ExtraTopics []string
	Flags       RelayFlags
	Write       WriteConfig
	// Fault runs alongside the writers and returns when its faults are
	// done, with how many in-flight windows they may have duplicated
	// (see Result.DupBound). It must leave at least one relay running.
	Fault Fault
	// Drain bounds the wait for the outbox to empty after the writers and
	// the fault finished. Default 2 minutes.
	Drain time.Duration
	// Check, if set, runs after the verifier, with the outbox rows.
	Check func(ctx context.Context, w *World, res *Result) error
	// Large, if set, turns the claim check on (see LargeConfig); the
	// claim check's own checks run after the verifier, before Check.
	Large *LargeConfig
}

// Run builds the scenario's world, writes under the fault, waits until the
// relays drained the outbox, stops them cleanly and verifies the broker
// against the database. Result.Check tells whether the promises held; an
// error means the scenario could not run or a component failed outright.
func Run(ctx context.Context, env *Env, plan Plan) (res Result, err error) {
	env.Logf("%s: seed %d, %d relays, %d writers, %d events", plan.Name, env.Seed, plan.Relays, plan.Write.Writers, plan.Write.Events)
	if plan.OwnCluster && env.Cluster == nil && env.MySQLd == nil {
		return res, fmt.Errorf("%s: needs a PostgreSQL cluster of its own (Env.Cluster)", plan.Name)
	}
	broker, err := StartBroker(ctx, env, plan.Broker)
	if err != nil {
		return res, err
	}
	defer func() {
		if serr := broker.Close(); serr != nil && err == nil {
			err = serr
		}
	}()
	fleet, err := NewFleet(env, broker.Addr(), plan.Flags)
	if err != nil {
		return res, err
	}
	defer fleet.Close() // kills only relays left running after a failure
	var large *largeStore
	if plan.Large != nil {
		if large, err = newLargeStore(ctx, env, *plan.Large); err != nil {
			return res, err
		}
		defer large.close()
		fleet.large = large
	}
	if plan.ProxyDB {
		fleet.ProxyDatabase()
	}
	writers, err := NewWriters(ctx, env, plan.Write)
	if err != nil {
		return res, err
	}
	defer writers.Close()
	var order *commitOrder
	if plan.Flags.Mode == WALMode {
		if order, err = newCommitOrder(ctx, env); err != nil {
			return res, err
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			fleet.KillAll()
			order.drop(dctx)
			dropWALSlot(dctx, env)
		}()
	}
	for i := range plan.Relays {
		if plan.FixedIDs {
			err = fleet.StartAs(fmt.Sprintf("relay-%d", i))
		} else {
			_, err = fleet.Start()
		}
		if err != nil {
			return res, err
		}
	}
	if plan.Flags.Mode == WALMode {
		// Events written before the slot exists are published from the
		// table, in id order (the relay cannot know their commit order):
		// the writers start once a relay streams.
		if !waitUntil(ctx, 30*time.Second, func() bool { return fleet.Streaming() != "" }) {
			return res, fmt.Errorf("%s: no relay streams 30s after start", plan.Name)
		}
	}
	w := &World{Env: env, Broker: broker, Fleet: fleet, Writers: writers, Flags: plan.Flags, Tally: &Tally{},
		large: large, topics: append(slices.Clone(plan.Broker.Topics), plan.ExtraTopics...)}

	start := time.Now()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	faultDone := make(chan error, 1)
	windows := 0
	go func() {
		if plan.Fault == nil {
			faultDone <- nil
			return
		}
		n, err := plan.Fault(runCtx, w)
		windows = n
		faultDone <- err
	}()
	werr := writers.Run(runCtx)
	if werr != nil {
		cancel()
	}
	ferr := <-faultDone
	if err := errors.Join(werr, ferr); err != nil {
		return res, err
	}
	env.Logf("%s: writers and faults done after %s: %d events committed, %d rolled back, %d transactions of unknown outcome; draining",
		plan.Name, time.Since(start).Round(time.Millisecond), writers.Committed(), writers.RolledBack(), writers.UnknownTxs())

	drain := plan.Drain
	if drain == 0 {
		drain = 2 * time.Minute
	}
	if err := waitDrained(ctx, env, drain); err != nil {
		return res, errors.Join(err, fleet.Unexpected())
	}
	if err := fleet.Unexpected(); err != nil {
		return res, err
	}
	if err := fleet.StopAll(); err != nil {
		return res, err
	}
	env.Logf("%s: drained and stopped after %s; verifying", plan.Name, time.Since(start).Round(time.Millisecond))

	topics := append(append([]string{TopicEnt, TopicGorm}, plan.Broker.Topics...), plan.ExtraTopics...)
	if err := broker.Settle(ctx, dedupe(topics)); err != nil {
		return res, fmt.Errorf("settle the broker before verifying: %w", err)
	}
	if order != nil {
		if w.CommitRank, err = order.ranks(ctx); err != nil {
			return res, err
		}
	}
	res, byID, err := Verify(ctx, env, broker.Addr(), dedupe(topics), w.Tally.unordered(), w.CommitRank)
	if err != nil {
		return res, err
	}
	res.Scenario = plan.Name
	res.Mode = plan.Flags.Mode
	res.Broker = broker.Name()
	if env.MySQL() {
		res.DB = "mariadb"
	}
	res.RolledBack = writers.RolledBack()
	res.Crashes = fleet.Kills()
	res.SameIDRestarts = fleet.Restarts()
	w.Tally.fill(&res)
	// One in-flight window per fault that can interrupt a relay between
	// the broker's ack and the mark, plus every replayed row (delivered
	// once more on purpose).
	res.DupBound = windows*plan.Flags.MaxInFlight() + w.Tally.replayed
	if res.Duplicates > res.DupBound {
		res.DupNotes = append(res.DupNotes, relayHandovers(env)...)
	}
	if err := writers.CrossCheck(byID); err != nil {
		return res, fmt.Errorf("writers and outbox disagree: %w", err)
	}
	if large != nil {
		if err := checkLarge(ctx, w, &res); err != nil {
			return res, fmt.Errorf("%s: the claim check: %w", plan.Name, err)
		}
	}
	if plan.Check != nil {
		if err := plan.Check(ctx, w, &res); err != nil {
			return res, err
		}
	}
	env.Logf("%s: %s (records=%d dup_bound=%d slow_broker_holds=%d retried=%d unordered_retried=%d) in %s", plan.Name, res.Line(), res.Records, res.DupBound, res.SlowBroker, len(w.Tally.unordered()), res.Unordered, time.Since(start).Round(time.Millisecond))
	return res, nil
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// Backlog counts the outbox rows not yet published or dead.
func Backlog(ctx context.Context, env *Env) (int, error) {
	names, err := env.names()
	if err != nil {
		return 0, err
	}
	var n int
	err = env.DB.SQL.QueryRowContext(ctx, `SELECT count(*) FROM `+names.Table+` WHERE state IN ('pending', 'claimed')`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count backlog: %w", err)
	}
	return n, nil
}

// waitDrained waits until the backlog is empty. On timeout it describes
// what is stuck, for a relay bug report.
func waitDrained(ctx context.Context, env *Env, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		n, err := Backlog(ctx, env)
		if err != nil {
			// The server may be recovering from a crash: retry until the
			// deadline.
			if time.Now().After(deadline) {
				return err
			}
			if !sleep(ctx, 500*time.Millisecond) {
				return ctx.Err()
			}
			continue
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("outbox not drained after %s: %d rows pending or claimed; %s", limit, n, describeStuck(ctx, env))
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}

func describeStuck(ctx context.Context, env *Env) string {
	names, err := env.names()
	if err != nil {
		return err.Error()
	}
	owner := `coalesce(lease_owner, '-')`
	if env.MySQL() {
		owner = `LOWER(HEX(lease_owner))` // a key (outboxsql.MySQLLeaseKey), zeros if none
	}
	rows, err := env.DB.SQL.QueryContext(ctx, `SELECT state, `+owner+`, attempts, count(*), min(id), max(id), min(coalesce(last_error, ''))
		FROM `+names.Table+` WHERE state IN ('pending', 'claimed') GROUP BY 1, 2, 3 ORDER BY 4 DESC LIMIT 10`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	out := "stuck rows (state, lease_owner, attempts, count, min id, max id, an error):"
	for rows.Next() {
		var (
			state, owner, lastErr string
			attempts, n           int
			lo, hi                int64
		)
		if err := rows.Scan(&state, &owner, &attempts, &n, &lo, &hi, &lastErr); err != nil {
			return err.Error()
		}
		out += fmt.Sprintf("\n  %s %s %d %d %d..%d %q", state, owner, attempts, n, lo, hi, lastErr)
	}
	var relays string
	live := `SELECT coalesce(string_agg(id || ' ' || (now() - heartbeat_at)::text, ', '), 'none') FROM ` + names.Relays
	if env.MySQL() {
		live = `SELECT coalesce(GROUP_CONCAT(CONCAT(id, ' ', TIMESTAMPDIFF(MICROSECOND, heartbeat_at, NOW(6)) / 1e6, 's') SEPARATOR ', '), 'none') FROM ` + names.Relays
	}
	_ = env.DB.SQL.QueryRowContext(ctx, live).Scan(&relays)
	return out + "\n  live relays: " + relays
}
