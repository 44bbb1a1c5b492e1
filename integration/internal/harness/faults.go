package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
)

// Fault injects one kind of fault while the writers run, until they are
// done and it injected at least its minimum, and returns how many in-flight
// windows it may have duplicated (see Result.DupBound). Faults compose with
// Mix.
type Fault func(ctx context.Context, w *World) (dupWindows int, err error)

// Tally counts what the faults did, for the result line, and what the
// verifier must know about the operators' work.
type Tally struct {
	mu          sync.Mutex
	pauses      int
	partitions  int
	adminOps    int
	dbCrashes   int
	slowBroker  int
	leaderKills int
	connLosses  int
	replayed    int             // rows replayed: each may be delivered once more
	retried     map[string]bool // event ids that were dead and retried
}

func (t *Tally) add(f func(t *Tally)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.retried == nil {
		t.retried = map[string]bool{}
	}
	f(t)
}

// fill copies the counts into res.
func (t *Tally) fill(res *Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	res.Pauses, res.Partitions, res.AdminOps, res.DBCrashes, res.SlowBroker = t.pauses, t.partitions, t.adminOps, t.dbCrashes, t.slowBroker
	res.LeaderKills, res.ConnLosses = t.leaderKills, t.connLosses
}

// unordered returns the events the order check leaves out (see Verify).
func (t *Tally) unordered() map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]bool, len(t.retried))
	for id := range t.retried {
		out[id] = true
	}
	return out
}

// Mix runs faults at the same time and sums their windows. The first error
// stops the others.
func Mix(faults ...Fault) Fault {
	return func(ctx context.Context, w *World) (int, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			windows int
			errs    []error
		)
		for _, f := range faults {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, err := f(ctx, w)
				mu.Lock()
				defer mu.Unlock()
				windows += n
				if err != nil && !errors.Is(err, context.Canceled) {
					w.Env.Logf("fault failed, stopping the other faults: %v", err)
					errs = append(errs, err)
					cancel()
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return windows, err
		}
		return windows, ctx.Err()
	}
}

// until runs round until the writers are done and at least min rounds ran,
// each after a random pause in [lo, hi).
func until(ctx context.Context, w *World, min int, lo, hi time.Duration, round func(k int) error) error {
	for k := 0; k < min || w.Writers.Committed() < w.Writers.cfg.Events; k++ {
		if !sleep(ctx, w.Env.Duration(lo, hi)) {
			return ctx.Err()
		}
		if err := round(k); err != nil {
			return err
		}
	}
	return nil
}

// victim picks a running relay; every other time it waits (up to wait) until
// that relay holds claimed rows, so the fault hits a batch in flight.
func victim(ctx context.Context, w *World, k int, wait time.Duration) (string, bool) {
	live := w.Fleet.Live()
	if len(live) == 0 {
		return "", false
	}
	id := live[w.Env.Intn(len(live))]
	if w.Flags.Mode == WALMode {
		// Two faults in three hit the relay that streams: the standbys
		// hold nothing.
		if s := w.Fleet.Streaming(); s != "" && k%3 != 2 {
			id = s
		}
		return id, true
	}
	if k%2 == 1 {
		waitUntil(ctx, wait, func() bool { return holdsClaims(ctx, w.Env, id) })
	}
	return id, true
}

// Kills SIGKILLs a random relay every 0.3-2 s, at least min times, and
// starts a replacement under a fresh id (a plain process restart). One
// window per kill.
func Kills(min int) Fault {
	return func(ctx context.Context, w *World) (int, error) {
		n := 0
		err := until(ctx, w, min, 300*time.Millisecond, 2*time.Second, func(k int) error {
			id, ok := victim(ctx, w, k, 2*time.Second)
			if !ok {
				return nil
			}
			if err := w.Fleet.Kill(id); err != nil {
				return nil // killed by another fault meanwhile
			}
			n++
			if !sleep(ctx, w.Env.Duration(0, time.Second)) {
				return ctx.Err()
			}
			return w.Fleet.startRetry(ctx, "")
		})
		return n, err
	}
}

// SameIDRestarts SIGKILLs a random relay about every period (±30%), at
// least min times, and starts it again at once under the same --id, within
// its lease (a StatefulSet pod or a systemd unit): often while it holds
// claimed rows. One window per restart.
func SameIDRestarts(min int, period time.Duration) Fault {
	return func(ctx context.Context, w *World) (int, error) {
		n := 0
		// Rounds go on until min of them restarted a relay: a round finds
		// none running, or its victim killed by another fault first, now
		// and then when faults are mixed.
		err := untilCounted(ctx, w, min, period*7/10, period*13/10, func(k int) (bool, error) {
			id, ok := victim(ctx, w, k, time.Second)
			if !ok {
				return false, nil
			}
			if err := w.Fleet.Restart(ctx, id); err != nil {
				if w.Fleet.isLive(id) || errors.Is(err, errStart) {
					return false, err
				}
				// Killed by another fault meanwhile; make sure the id
				// runs again.
				if err := w.Fleet.startRetry(ctx, id); err != nil && !w.Fleet.isLive(id) {
					return false, err
				}
				n++ // a window, if not a restart
				return false, nil
			}
			n++
			return true, nil
		})
		return n, err
	}
}

// untilCounted is until, counting toward min only the rounds that say
// they did what they are for.
func untilCounted(ctx context.Context, w *World, min int, lo, hi time.Duration, round func(k int) (bool, error)) error {
	done := 0
	for k := 0; done < min || w.Writers.Committed() < w.Writers.cfg.Events; k++ {
		if !sleep(ctx, w.Env.Duration(lo, hi)) {
			return ctx.Err()
		}
		ok, err := round(k)
		if err != nil {
			return err
		}
		if ok {
			done++
		}
	}
	return nil
}

// Pauses SIGSTOPs a random relay for longer than StaleAfter and the lease
// (lease+1 s to lease+3 s), then SIGCONTs it, at least min times, one relay
// at a time. The paused relay wakes up believing it still owns its shards
// and its claimed rows. One window per pause.
func Pauses(min int) Fault {
	return func(ctx context.Context, w *World) (int, error) {
		n := 0
		lease := w.Flags.Lease
		err := until(ctx, w, min, time.Second, 3*time.Second, func(k int) error {
			id, ok := victim(ctx, w, k, 2*time.Second)
			if !ok {
				return nil
			}
			d := w.Env.Duration(lease+time.Second, lease+3*time.Second)
			w.Env.Logf("pause: %s stopped for %s", id, d.Round(time.Millisecond))
			if w.Fleet.Pause(ctx, id, d) {
				n++
				w.Tally.add(func(t *Tally) { t.pauses++ })
			}
			return nil
		})
		return n, err
	}
}

// SlowBroker makes the broker hold every produce request that arrives in a
// 1 s window for longer than the lease (lease+2 s), about every period
// (±30%), at least min times: the relays' publishes hang while their
// leases run out. A window in which no produce arrived (the relays were
// idle, paused, cut off by another fault, or reconnecting after a database
// crash) does not count: it is opened again until one catches a request.
// Other faults may keep every relay from producing for a while (a broker
// partition alone lasts up to 12 s), so a round gives up only after
// slowBrokerPatience of windows without a request while events were still
// waiting to be published — then the relays stopped publishing, which the
// scenario reports. A round that finds the outbox drained and the writers
// done ends without a hold. The broker needs BrokerConfig.Control. One
// window per live relay per hold.
func SlowBroker(min int, period time.Duration) Fault {
	return func(ctx context.Context, w *World) (int, error) {
		n := 0
		hold := w.Flags.Lease + 2*time.Second
		err := until(ctx, w, min, period*7/10, period*13/10, func(int) error {
			before, err := w.Broker.HeldProduce(ctx)
			if err != nil {
				return err
			}
			start := time.Now()
			deadline := start.Add(slowBrokerPatience)
			for {
				if err := w.Broker.HoldProduce(ctx, time.Second, hold); err != nil {
					return err
				}
				// A request is counted as it arrives: once the window
				// closed, the count says whether it caught any.
				if !sleep(ctx, time.Second+100*time.Millisecond) {
					return ctx.Err()
				}
				held, err := w.Broker.HeldProduce(ctx)
				if err != nil {
					return err
				}
				if held > before {
					w.Env.Logf("slow broker: %d produce request(s) of a 1s window held for %s (%s to catch one)", held-before, hold, time.Since(start).Round(time.Millisecond))
					w.Tally.add(func(t *Tally) { t.slowBroker++ })
					n += len(w.Fleet.Live())
					return nil
				}
				if w.Writers.Committed() >= w.Writers.cfg.Events && !outboxHas(ctx, w.Env, `state IN ('pending', 'claimed')`) {
					return nil // nothing left to publish: nothing to hold
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("slow broker: no produce request arrived in %s while events waited to be published", slowBrokerPatience)
				}
			}
		})
		return n, err
	}
}

// slowBrokerPatience bounds how long a SlowBroker round waits for a produce
// request to hold: longer than any other fault keeps the relays from the
// broker (partitions up to 12 s, a database crash and the relays' reconnect
// after it), short enough to report relays that stopped publishing.
const slowBrokerPatience = 60 * time.Second

// Partitions freezes, at least min times, either one relay's connections
// to PostgreSQL (its own proxy: Plan.ProxyDB) or every relay's connections
// to the broker (the broker's proxy: BrokerConfig.Proxy), for 5-12 s
// (longer than StaleAfter), then drops them (a reset) or thaws them (the
// bytes flow on), at random. Rounds alternate between the two paths when
// both exist. A database partition is one window for its relay, a broker
// partition one per live relay.
func Partitions(min int) Fault {
	return func(ctx context.Context, w *World) (int, error) {
		n := 0
		err := until(ctx, w, min, time.Second, 3*time.Second, func(k int) error {
			var (
				p       Partitioner
				what    string
				windows int
			)
			id, _ := victim(ctx, w, k/2, 2*time.Second)
			if dbp := w.Fleet.DBProxy(id); dbp != nil && (k%2 == 0 || w.Broker.Proxy() == nil) {
				p, what, windows = dbp, id+" <-> postgres", 1
			} else if bp := w.Broker.Proxy(); bp != nil {
				p, what, windows = bp, "relays <-> broker", len(w.Fleet.Live())
			} else {
				return errors.New("partitions: no proxy (set Plan.ProxyDB or BrokerConfig.Proxy)")
			}
			d := w.Env.Duration(5*time.Second, 12*time.Second)
			p.Freeze()
			drop := w.Env.Intn(2) == 0
			w.Env.Logf("partition: %s frozen (%d sockets) for %s, then %s", what, p.Conns(), d.Round(time.Millisecond), map[bool]string{true: "dropped", false: "thawed"}[drop])
			ok := sleep(ctx, d)
			if drop {
				p.Drop()
			} else {
				p.Thaw()
			}
			if !ok {
				return ctx.Err()
			}
			n += windows
			w.Tally.add(func(t *Tally) { t.partitions++ })
			return nil
		})
		return n, err
	}
}

// ConnLosses ends every relay connection to the database from the
// server's side (as an operator's kill, a proxy's or a failover's does)
// every 1-4 s, at least min times: on PostgreSQL pg_terminate_backend of
// the fleet's application_name, on MySQL KILL CONNECTION of its account.
// The relays must reconnect by themselves. A round that fails (the
// server crashed by another fault meanwhile) counts for nothing. One
// window per live relay per round.
func ConnLosses(min int) Fault {
	return func(ctx context.Context, w *World) (int, error) {
		windows := 0
		err := until(ctx, w, min, time.Second, 4*time.Second, func(k int) error {
			n, err := endRelayConns(ctx, w)
			if err != nil {
				w.Env.Logf("connection losses: round %d: %v", k, err)
				return nil
			}
			if n > 0 {
				w.Tally.add(func(t *Tally) { t.connLosses++ })
				windows += len(w.Fleet.Live())
			}
			return nil
		})
		return windows, err
	}
}

// DBCrashes crashes PostgreSQL (stop -m immediate, start), or in MariaDB
// mode the suite's mariadbd (SIGKILL, start), about every period (±30%), at
// least min times. The scenario runs on a server of its own
// (Plan.OwnCluster), and the writers must book failed commits as
// unknown (WriteConfig.UnknownOutcomes). One window per live relay per
// crash.
func DBCrashes(min int, period time.Duration) Fault {
	return func(ctx context.Context, w *World) (int, error) {
		if w.Env.Cluster == nil && w.Env.MySQLd == nil {
			return 0, errors.New("db crashes: the scenario has no server of its own (Env.Cluster or Env.MySQLd)")
		}
		n := 0
		err := until(ctx, w, min, period*7/10, period*13/10, func(int) error {
			start := time.Now()
			if w.Env.MySQLd != nil {
				if err := w.Env.MySQLd.Crash(ctx); err != nil {
					return err
				}
				w.Env.Logf("db crash: mariadbd SIGKILLed and back after %s", time.Since(start).Round(time.Millisecond))
			} else {
				if err := w.Env.Cluster.Crash(ctx); err != nil {
					return err
				}
				w.Env.Logf("db crash: PostgreSQL stopped with -m immediate and back after %s", time.Since(start).Round(time.Millisecond))
			}
			w.Tally.add(func(t *Tally) { t.dbCrashes++ })
			n += len(w.Fleet.Live())
			return nil
		})
		return n, err
	}
}

// AdminOps runs the outbox CLI as separate processes every 0.3-1 s, at
// least min times, while everything else runs: dead retry (really and as
// a dry run), dead drop (really and as a dry run) and replay of the last
// 2 s (really and as a dry run). To give retry and drop work, it writes a
// poison aggregate (an event before, a poison event, two after) every few
// rounds, and creates the refused topic once an event of it is dead (or
// near the end), so that retried
// unknown-topic events get delivered, after later events of their
// aggregate: the documented policy, which the verifier accounts for. The
// broker must refuse poison (see AdminConfig). Replays add their rows to
// the duplicate bound; a drop removes its events from the writers' books.
func AdminOps(min int) Fault {
	return func(ctx context.Context, w *World) (int, error) {
		created := false
		kinds := poisonKinds()
		err := until(ctx, w, min, 300*time.Millisecond, time.Second, func(k int) error {
			if k%4 == 0 {
				// The unknown-topic kind first, so one is dead before
				// the topic exists.
				kind := kinds[(k/4+len(kinds)-1)%len(kinds)]
				if err := emitPoison(ctx, w, fmt.Sprintf("admin-poison-%d", k), kind); err != nil {
					return err
				}
			}
			if !created && (deadOn(ctx, w.Env, PoisonTopic) || w.Writers.Committed() >= w.Writers.cfg.Events*9/10) {
				if err := createTopic(ctx, w.Broker.Addr(), PoisonTopic, 2); err != nil {
					return err
				}
				created = true
				w.Env.Logf("admin ops: created topic %s; retried events of it can be delivered now", PoisonTopic)
				// Retry at once: the dead events of that topic now go
				// out after later events of their aggregates.
				return adminOp(ctx, w, []string{"dead", "retry", "--topic", PoisonTopic})
			}
			return adminOp(ctx, w, adminOpsMenu[w.Env.Intn(len(adminOpsMenu))])
		})
		if err != nil {
			return 0, err
		}
		if !created {
			return 0, createTopic(ctx, w.Broker.Addr(), PoisonTopic, 2)
		}
		// The relay's producer may still refuse the new topic for a while
		// (Sarama's per-topic circuit breaker stays open 10 s, its
		// metadata is cached): the retried events die again. Retry them,
		// as an operator would, until none is dead, for up to 40 s.
		for deadline := time.Now().Add(40 * time.Second); deadOn(ctx, w.Env, PoisonTopic) && time.Now().Before(deadline); {
			if err := adminOp(ctx, w, []string{"dead", "retry", "--topic", PoisonTopic}); err != nil {
				return 0, err
			}
			if !sleep(ctx, 2*time.Second) {
				return 0, ctx.Err()
			}
		}
		return 0, nil
	}
}

// AdminBroker is the broker of scenarios with AdminOps: it refuses records
// over 256 KiB and topics it does not know, so poison events die.
func AdminBroker() BrokerConfig {
	return BrokerConfig{Topics: []string{TopicEnt, TopicGorm}, NoAutoCreate: true, MaxMessageBytes: 256 << 10}
}

// adminOpsMenu are the CLI commands AdminOps picks from (without the
// connection flags).
var adminOpsMenu = [][]string{
	{"dead", "retry", "--all"},
	{"dead", "retry", "--all", "--dry-run"},
	{"replay", "--since", "2s"},
	{"dead", "retry", "--all"},
	{"replay", "--since", "2s", "--dry-run"},
	{"dead", "drop", "--all", "--dry-run"},
	// Operators drop what they gave up on (records too large for the
	// broker) and keep what a fix will let through (the missing topic).
	{"dead", "drop", "--topic", TopicGorm, "--yes"},
}

// adminOp runs one CLI command and books its effect.
func adminOp(ctx context.Context, w *World, op []string) error {
	args := append(append([]string{}, op...), "--database-url", w.Env.DB.URL, "--json")
	if !w.Env.MySQL() {
		args = append(args, "--schema", w.Env.DB.Schema) // on MySQL the database in the URL is the scenario's
	}
	var (
		out []byte
		err error
	)
	// A database crash can fail a run: try again once it is back (crash
	// recovery under a soak's load can take a while).
	for attempt := 0; attempt < 30; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err = exec.CommandContext(cctx, w.Env.Bin.Outbox, args...).Output()
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
		if !sleep(ctx, time.Second) {
			return ctx.Err()
		}
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return fmt.Errorf("outbox %v: %w", op, err)
	}
	var res struct {
		Retried []struct {
			EventID string `json:"event_id"`
			Topic   string `json:"topic"`
		} `json:"retried"`
		Dropped []struct {
			EventID string `json:"event_id"`
			Topic   string `json:"topic"`
		} `json:"dropped"`
		Replayed int  `json:"replayed"`
		DryRun   bool `json:"dry_run"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return fmt.Errorf("outbox %v: output %q: %w", op, out, err)
	}
	w.Tally.add(func(t *Tally) {
		t.adminOps++
		if res.DryRun {
			return
		}
		for _, r := range res.Retried {
			t.retried[r.EventID] = true
		}
		t.replayed += res.Replayed
	})
	if !res.DryRun {
		for _, r := range res.Dropped {
			w.Writers.Dropped(r.Topic, r.EventID)
		}
	}
	if n := len(res.Retried) + len(res.Dropped) + res.Replayed; n > 0 && !res.DryRun {
		topics := map[string]int{}
		for _, r := range res.Retried {
			topics[r.Topic]++
		}
		for _, r := range res.Dropped {
			topics[r.Topic]++
		}
		w.Env.Logf("admin ops: outbox %v: %d event(s) %v", op, n, topics)
	}
	return nil
}

// createTopic creates topic on the broker, as an operator fixing a missing
// topic would. It tries for up to 30 s: a partition may cut the broker off.
func createTopic(ctx context.Context, broker, topic string, partitions int32) error {
	var err error
	for attempt := 0; attempt < 30; attempt++ {
		if err = createTopicOnce(ctx, broker, topic, partitions); err == nil {
			return nil
		}
		if !sleep(ctx, time.Second) {
			return ctx.Err()
		}
	}
	return err
}

func createTopicOnce(ctx context.Context, broker, topic string, partitions int32) error {
	seeds := strings.Split(broker, ",")
	// One copy on kfake, one per node on the real cluster.
	err := kafkatest.CreateTopic(ctx, seeds, topic, partitions, int16(min(len(seeds), 3)), nil)
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return nil
	}
	return err
}

// deadOn reports whether an event of topic is dead.
func deadOn(ctx context.Context, env *Env, topic string) bool {
	return outboxHas(ctx, env, `state = 'dead' AND topic = $1`, topic)
}

// LeaderKills SIGKILLs the broker leading most partitions about every
// period (±30%), at least min times, and starts it again 2-5 s later: on
// the real cluster a leader election each time, with the producers'
// retries and the idempotent producer's sequences crossing it; on kfake,
// its one broker stops and starts. One window per live relay per kill.
func LeaderKills(min int, period time.Duration) Fault {
	return func(ctx context.Context, w *World) (int, error) {
		n := 0
		err := until(ctx, w, min, period*7/10, period*13/10, func(int) error {
			var restart func(context.Context) error
			if r := w.Broker.real; r != nil {
				var id int32
				var err error
				if restart, id, err = r.killLeader(ctx); err != nil {
					return err
				}
				w.Env.Logf("leader kill: node %d SIGKILLed", id)
			} else {
				if err := w.Broker.Stop(); err != nil {
					return err
				}
				restart = w.Broker.Start
				w.Env.Logf("leader kill: the broker stopped")
			}
			ok := sleep(ctx, w.Env.Duration(2*time.Second, 5*time.Second))
			// Started again even when the run is ending, so it drains.
			if err := restart(context.WithoutCancel(ctx)); err != nil {
				return err
			}
			n += len(w.Fleet.Live())
			w.Tally.add(func(t *Tally) { t.leaderKills++ })
			if !ok {
				return ctx.Err()
			}
			return nil
		})
		return n, err
	}
}
