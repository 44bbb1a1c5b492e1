package harness

import (
	"context"
	"fmt"
	"time"
)

// The scenarios below inject the faults deployments see besides a plain
// crash (see the faults notes of the repository): restarts under the same
// id, pauses and a slow broker, network partitions, operators at work and a
// database crash. Each states its duplicate bound in dup windows: one
// MaxInFlight window per fault and affected relay, plus replayed rows.

// SameIDRestart: 3 relays with fixed ids (relay-0..relay-2, a StatefulSet);
// one is SIGKILLed and started again under the same --id about every
// period, at least restarts times, often while it holds claimed rows. The
// new process meets rows claimed under its own name by a process that is
// gone, well within their lease. Bound: one window per restart.
func SameIDRestart(s Size, restarts int, period time.Duration) Plan {
	return Plan{
		Name: "same-id-restart", Relays: 3, FixedIDs: true,
		Flags: DefaultRelayFlags(), Write: writeLoad(s),
		Fault: SameIDRestarts(restarts, period),
		Check: wantNoDead("same-id-restart"),
	}
}

// PauseSlowBroker: a relay is SIGSTOPped for longer than StaleAfter and
// its lease (pauses times, one at a time) while the broker holds the
// produce requests of a 1 s window for longer than the lease about every
// holdEvery. The paused relay wakes up with claims and shards its peers
// took over; the held publishes are acknowledged after their rows' lease
// ran out. Bound: one window per pause, and one per live relay per hold.
func PauseSlowBroker(s Size, pauses int, holdEvery time.Duration) Plan {
	b := BrokerConfig{Control: true}
	return Plan{
		Name: "pause-slow-broker", Relays: 3, Broker: b,
		Flags: DefaultRelayFlags(), Write: writeLoad(s),
		Fault: Mix(Pauses(pauses), SlowBroker(1, holdEvery)),
		Check: wantNoDead("pause-slow-broker"),
	}
}

// SlowBrokerSameID is the reported repro: the broker holds the produce
// requests of a 1 s window for longer than the lease about every
// holdEvery, while relays with fixed ids are SIGKILLed and restarted under
// the same id about every restartEvery. Bound: one window per restart, one
// per live relay per hold.
func SlowBrokerSameID(s Size, holdEvery, restartEvery time.Duration) Plan {
	return Plan{
		Name: "slow-broker-same-id", Relays: 3, FixedIDs: true, Broker: BrokerConfig{Control: true},
		Flags: DefaultRelayFlags(), Write: writeLoad(s),
		Fault: Mix(SlowBroker(1, holdEvery), SameIDRestarts(2, restartEvery)),
		Check: wantNoDead("slow-broker-same-id"),
	}
}

// Partition: every relay reaches PostgreSQL through a proxy of its own and
// the broker through a shared one. Rounds alternate: one relay's database
// connections, then every relay's broker connections, freeze for 5-12 s
// (past StaleAfter: a frozen relay's open transaction keeps its row locks
// while its peers declare it dead), then drop or thaw. Bound: one window per
// database partition, one per live relay per broker partition.
func Partition(s Size, rounds int) Plan {
	return Plan{
		Name: "partition", Relays: 3, ProxyDB: true, Broker: BrokerConfig{Proxy: true},
		Flags: DefaultRelayFlags(), Write: writeLoad(s),
		Fault: Partitions(rounds),
		Check: wantNoDead("partition"),
	}
}

// Admin: operators at work. While writers and 3 relays run, the outbox CLI
// runs as separate processes (dead retry, dead drop, replay, and their dry
// runs), at least ops times; poison aggregates give retry and drop work,
// and the refused topic is created mid-run so retried events of it get
// delivered late. Dropped events leave the books; events ever retried are
// left out of the order check (a dead event does not block its aggregate);
// replayed events' second deliveries are duplicates. Bound: the replayed
// rows.
func Admin(s Size, ops int) Plan {
	flags := DefaultRelayFlags()
	flags.MaxAttempts = 4
	flags.BackoffMin, flags.BackoffMax = 100*time.Millisecond, time.Second
	return Plan{
		Name: "admin-ops", Relays: 3, Broker: AdminBroker(), ExtraTopics: []string{PoisonTopic},
		Flags: flags, Write: writeLoad(s),
		Fault: AdminOps(ops),
		Check: func(_ context.Context, _ *World, res *Result) error {
			if res.AdminOps < ops {
				return fmt.Errorf("admin-ops: only %d CLI runs, want at least %d", res.AdminOps, ops)
			}
			return nil
		},
	}
}

// DBCrash: PostgreSQL (a cluster of the scenario's own) is crashed with
// stop -m immediate and started again, crashes times about every period,
// under load. Writers and relays must reconnect by themselves; a writer's
// transaction that fails at the crash is of unknown outcome (accepted in
// the outbox or not, and delivered if in it). Bound: one window per live
// relay per crash.
func DBCrash(s Size, crashes int, period time.Duration) Plan {
	load := writeLoad(s)
	load.UnknownOutcomes = true
	return Plan{
		Name: "db-crash", Relays: 3, OwnCluster: true,
		Flags: DefaultRelayFlags(), Write: load,
		Fault: DBCrashes(crashes, period),
		Check: func(_ context.Context, w *World, res *Result) error {
			w.Env.Logf("db-crash: %d writer transactions of unknown outcome", w.Writers.UnknownTxs())
			if res.DBCrashes < crashes {
				return fmt.Errorf("db-crash: only %d crashes, want %d", res.DBCrashes, crashes)
			}
			return wantNoDead("db-crash")(nil, w, res)
		},
	}
}

// Mixed runs every fault at once: plain kills, same-id restarts (fixed
// ids), pauses, a slow broker, partitions of the database and the broker,
// operators at work (with poison events) and database crashes (a cluster of
// its own). The soak runs it over a million events. Bound: the sum of the
// faults' bounds.
func Mixed(s Size) Plan {
	load := writeLoad(s)
	load.UnknownOutcomes = true
	// Some events delivered not before a time, so every fault also meets
	// aggregates held behind a delayed event (the verifier's early check).
	load.DelayPercent, load.DelayMax = 2, 3*time.Second
	flags := DefaultRelayFlags()
	flags.MaxAttempts = 6
	flags.BackoffMin, flags.BackoffMax = 200*time.Millisecond, 2*time.Second
	broker := AdminBroker()
	broker.Proxy, broker.Control = true, true
	return Plan{
		Name: "mixed", Relays: 3, FixedIDs: true, ProxyDB: true, OwnCluster: true,
		Broker: broker, ExtraTopics: []string{PoisonTopic},
		Flags: flags, Write: load,
		Fault: Mix(
			Kills(2),
			SameIDRestarts(3, 3*time.Second),
			Pauses(1),
			SlowBroker(1, 20*time.Second),
			Partitions(2),
			AdminOps(10),
			DBCrashes(1, 15*time.Second),
		),
		Drain: 5 * time.Minute,
	}
}

// wantNoDead fails a scenario in which an event died: none of its faults
// lasts long enough to exhaust the retries of an innocent event.
func wantNoDead(name string) func(context.Context, *World, *Result) error {
	return func(_ context.Context, _ *World, res *Result) error {
		if res.Dead != 0 {
			return fmt.Errorf("%s: dead=%d, want 0", name, res.Dead)
		}
		return nil
	}
}

// LeaderElection: 3 relays with fixed ids are SIGKILLed and restarted
// under the same id about every restartEvery while the broker leading most
// partitions is SIGKILLed and restarted about every killEvery, at least
// kills times: relay restarts land in leader elections. Nothing may go
// dead: an election is an outage of some partitions, not the events'
// fault. Bound: one window per restart, one per live relay per kill.
func LeaderElection(s Size, kills int, killEvery, restartEvery time.Duration) Plan {
	return Plan{
		Name: "leader-election", Relays: 3, FixedIDs: true,
		Flags: DefaultRelayFlags(), Write: writeLoad(s),
		Fault: Mix(LeaderKills(kills, killEvery), SameIDRestarts(2, restartEvery)),
		Check: wantNoDead("leader-election"),
	}
}
