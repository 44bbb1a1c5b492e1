package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/txoutbox/txoutbox"
)

// Size scales a scenario: Events committed over about Over.
type Size struct {
	Events int
	Over   time.Duration
}

func writeLoad(s Size) WriteConfig {
	return WriteConfig{Writers: 8, Events: s.Events, Over: s.Over, RollbackPercent: 10}
}

// Crash: 3 relays, 8 writers with 10% rollbacks; a chaos loop SIGKILLs a
// random relay at least kills times and starts a replacement. Every other
// kill waits until the victim holds claimed rows, so it dies with a batch in
// flight: published rows it has not marked yet.
func Crash(s Size, kills int) Plan {
	return Plan{
		Name:   "crash",
		Relays: 3,
		Flags:  DefaultRelayFlags(),
		Write:  writeLoad(s),
		Fault:  Kills(kills),
	}
}

// largeConfig is the claim check of the large-payload scenarios: one GORM
// event in ten carries 256 KB and goes by reference (threshold 16 KB),
// so that uploads are many and the store's time counts, as for a real
// bucket, without filling the machine's memory.
func largeConfig(orphans int) *LargeConfig {
	return &LargeConfig{Percent: 10, Bytes: 256 << 10, Over: 16 << 10, Orphans: orphans}
}

// LargePayloads: the crash scenario with the claim check on (LargeConfig):
// relays SIGKILLed right after an upload, before the reference is
// published, and at random; orphans large events to a topic the broker
// refuses die after their uploads. Nothing may be lost, phantom or out of
// order; every reference's object holds its event's bytes; the only
// orphan objects are the dead events', and Prune removes them once past
// their retention (a minute: the check waits for it).
func LargePayloads(s Size, kills, orphans int) Plan {
	flags := DefaultRelayFlags()
	flags.MaxAttempts = 4 // the orphans die sooner; an outage makes nothing dead
	load := writeLoad(s)
	cfg := largeConfig(orphans)
	load.LargePercent, load.LargeBytes = cfg.Percent, cfg.Bytes
	return Plan{
		Name:   "large-payloads",
		Relays: 3,
		Flags:  flags,
		Broker: BrokerConfig{Topics: []string{TopicEnt, TopicGorm}, NoAutoCreate: true},
		Write:  load,
		Large:  cfg,
		Fault: Mix(func(ctx context.Context, w *World) (int, error) {
			return 0, emitOrphans(ctx, w, orphans)
		}, UploadKills(kills)),
		Check: func(_ context.Context, _ *World, res *Result) error {
			if res.UploadKills == 0 {
				return errors.New("large-payloads: no relay was killed between an upload and its publish")
			}
			if res.Dead != orphans {
				return fmt.Errorf("large-payloads: dead=%d, want the %d orphans-to-be", res.Dead, orphans)
			}
			return nil
		},
	}
}

// StoreOutageLarge: the claim check's store refuses every connection for
// outage under the writers (LargeConfig): the large events and their
// aggregates wait, none dead, and everything is delivered, in order, once
// it is back.
//
// It kills no relay, so it allows no duplicate, and runs with the relay's
// default lease and StaleAfter (NoRelayFaultFlags): over a two-minute
// outage rows claimed behind a waiting aggregate outlived the suite's 10 s
// lease and went out twice, the relay's documented behaviour for rows that
// wait longer than their lease, not a fault this scenario injects.
func StoreOutageLarge(s Size, outage time.Duration) Plan {
	flags := NoRelayFaultFlags()
	flags.MaxAttempts = 3 // however few attempts, an outage makes nothing dead
	load := writeLoad(s)
	cfg := largeConfig(0)
	load.LargePercent, load.LargeBytes = cfg.Percent, cfg.Bytes
	return Plan{
		Name:   "store-outage",
		Relays: 3,
		Flags:  flags,
		Write:  load,
		Large:  cfg,
		Fault:  StoreOutage(outage),
		Drain:  outage + 2*time.Minute,
		Check: func(ctx context.Context, w *World, res *Result) error {
			if res.Dead != 0 {
				return fmt.Errorf("store-outage: dead=%d, want 0", res.Dead)
			}
			names, err := w.Env.names()
			if err != nil {
				return err
			}
			var held, maxAttempts int
			if err := w.Env.DB.SQL.QueryRowContext(ctx, `SELECT count(*), coalesce(max(attempts), 0) FROM `+names.Table+` WHERE last_error LIKE '%claim check%'`).Scan(&held, &maxAttempts); err != nil {
				return err
			}
			w.Env.Logf("store-outage: %d events failed on the store before it came back, up to %d attempts each", held, maxAttempts)
			if held == 0 {
				return errors.New("store-outage: no event failed on the store: the outage was not felt")
			}
			return nil
		},
	}
}

// Delayed: the crash scenario with 5% of the GORM writers' events
// delivered not before a time up to delayMax ahead. Each delayed event holds
// its aggregate's later events back, so the kills land while claims pass
// over held aggregates and scheduled rows fall due. No event may reach the
// broker before its time (Result.Early), order holds by id, and some events
// must have been held (else the scenario proved nothing).
func Delayed(s Size, kills int, delayMax time.Duration) Plan {
	load := writeLoad(s)
	load.DelayPercent, load.DelayMax = 5, delayMax
	return Plan{
		Name:   "delayed",
		Relays: 3,
		Flags:  DefaultRelayFlags(),
		Write:  load,
		Fault:  Kills(kills),
		Check: func(_ context.Context, w *World, res *Result) error {
			w.Env.Logf("delayed: %d delayed events, %d events held behind one", res.Delayed, res.HeldBehindDelay)
			if res.Delayed < s.Events/100 || res.HeldBehindDelay == 0 {
				return fmt.Errorf("delayed: %d delayed events and %d held behind one: the scenario did not delay enough", res.Delayed, res.HeldBehindDelay)
			}
			if res.Dead != 0 {
				return fmt.Errorf("delayed: dead=%d, want 0", res.Dead)
			}
			return nil
		},
	}
}

// CommitGap: writers hold their transactions open for random delays, and
// writer 0 for seconds, so higher outbox ids commit and get published long
// before lower ones commit. No fault: a relay that tracked a high-water mark
// of ids would skip the late commits.
func CommitGap(s Size) Plan {
	load := writeLoad(s)
	load.HoldMax = 100 * time.Millisecond
	load.LongHold = 3 * time.Second
	return Plan{
		Name: "commit-gap", Relays: 3, Flags: DefaultRelayFlags(), Write: load,
		Check: func(_ context.Context, w *World, res *Result) error {
			if w.Writers.Overtaken() == 0 {
				return errors.New("commit-gap: no event with a higher id was published while a lower id was uncommitted; the scenario did not create the gap")
			}
			w.Env.Logf("commit-gap: %d events with higher ids were published while a long transaction with lower ids was open", w.Writers.Overtaken())
			if res.Dead != 0 {
				return fmt.Errorf("commit-gap: dead=%d, want 0", res.Dead)
			}
			return nil
		},
	}
}

// BrokerOutage: the broker process is stopped (SIGTERM) for outage mid-run
// and started again on the same port with the same data directory. The
// backlog must grow while it is down and drain after.
func BrokerOutage(s Size, outage time.Duration) Plan {
	flags := DefaultRelayFlags()
	// Publishes that fail in the outage count as attempts, but only a
	// refusal of the message makes an event dead: with two attempts and
	// retries every 100ms to 1s, every event attempted in the outage
	// reaches MaxAttempts many times over, and none may go dead.
	flags.MaxAttempts = 2
	flags.BackoffMin, flags.BackoffMax = 100*time.Millisecond, time.Second
	var before, during int
	return Plan{
		Name:   "broker-outage",
		Relays: 3,
		Flags:  flags,
		Write:  writeLoad(s),
		Fault: func(ctx context.Context, w *World) (int, error) {
			if !sleep(ctx, s.Over/4) {
				return 0, ctx.Err()
			}
			var err error
			if before, err = Backlog(ctx, w.Env); err != nil {
				return 0, err
			}
			if err := w.Broker.Stop(); err != nil {
				return 0, err
			}
			w.Env.Logf("broker-outage: broker stopped, backlog %d", before)
			if !sleep(ctx, outage) {
				return 0, ctx.Err()
			}
			if during, err = Backlog(ctx, w.Env); err != nil {
				return 0, err
			}
			if err := w.Broker.Start(ctx); err != nil {
				return 0, err
			}
			w.Env.Logf("broker-outage: broker restarted on %s, backlog %d", w.Broker.Addr(), during)
			// A publish in flight when the broker stopped may be stored
			// and still reported failed: one window per relay.
			return len(w.Fleet.Live()), nil
		},
		Check: func(_ context.Context, _ *World, res *Result) error {
			if during <= before {
				return fmt.Errorf("broker-outage: backlog did not grow during the outage (%d before, %d after %s)", before, during, outage)
			}
			if res.Dead != 0 {
				return fmt.Errorf("broker-outage: %d events went dead during a %s outage", res.Dead, outage)
			}
			return nil
		},
	}
}

// DBConnLoss: every relay connection is ended by the server, rounds
// times, mid-run: on PostgreSQL found by application_name and ended with
// pg_terminate_backend; on MySQL found by the relays' account
// (Fleet.Account) in the process list and ended with KILL CONNECTION. The
// relays must reconnect by themselves and keep running.
func DBConnLoss(s Size, rounds int) Plan {
	return Plan{
		Name:   "db-connection-loss",
		Relays: 3,
		Flags:  DefaultRelayFlags(),
		Write:  writeLoad(s),
		Fault: func(ctx context.Context, w *World) (int, error) {
			total := 0
			for i := 0; i < rounds; i++ {
				if !sleep(ctx, w.Env.Duration(s.Over/time.Duration(2*rounds), s.Over/time.Duration(rounds))) {
					return 0, ctx.Err()
				}
				n, err := endRelayConns(ctx, w)
				if err != nil {
					return 0, fmt.Errorf("round %d: end the relays' connections: %w", i, err)
				}
				if n == 0 {
					return 0, fmt.Errorf("round %d: no relay connection found", i)
				}
				total += n
				w.Tally.add(func(t *Tally) { t.connLosses++ })
			}
			w.Env.Logf("db-connection-loss: ended %d relay connections in %d rounds", total, rounds)
			return rounds * len(w.Fleet.Live()), nil
		},
	}
}

// endRelayConns ends every connection of the fleet's relays to the
// scenario's database from the server's side, and returns how many.
func endRelayConns(ctx context.Context, w *World) (int, error) {
	db := w.Env.DB.SQL
	if !w.Env.MySQL() {
		var n int
		err := db.QueryRowContext(ctx,
			`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database() AND pid <> pg_backend_pid()`,
			w.Fleet.AppName()).Scan(&n)
		return n, err
	}
	if w.Fleet.Account() == "" {
		return 0, errors.New("the relays share the scenario's account: run on a server of the suite's own (Env.MySQLd)")
	}
	rows, err := db.QueryContext(ctx, `SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ? AND DB = DATABASE() AND ID <> CONNECTION_ID()`,
		w.Fleet.Account())
	if err != nil {
		return 0, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		// KILL takes no placeholder; id is the server's own number.
		_, err := db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1094 { // unknown thread: it ended meanwhile
			continue
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Rebalance: relays join and leave (SIGTERM, a clean shutdown) while the
// writers run; shards move between them. Per-key order must hold through
// every move, and a clean move must not publish anything twice.
func Rebalance(s Size, steps int) Plan {
	return Plan{
		Name:   "rebalance",
		Relays: 1,
		Flags:  NoRelayFaultFlags(),
		Write:  writeLoad(s),
		Fault: func(ctx context.Context, w *World) (int, error) {
			for i := 0; i < steps; i++ {
				if !sleep(ctx, s.Over/time.Duration(steps+1)) {
					return 0, ctx.Err()
				}
				live := w.Fleet.Live()
				grow := len(live) < 2 || (len(live) < 5 && w.Env.Intn(100) < 55)
				if grow {
					id, err := w.Fleet.Start()
					if err != nil {
						return 0, err
					}
					w.Env.Logf("rebalance: %s joined (%d live)", id, len(live)+1)
					continue
				}
				victim := live[w.Env.Intn(len(live))]
				if err := w.Fleet.Stop(victim); err != nil {
					return 0, err
				}
				w.Env.Logf("rebalance: %s left (%d live)", victim, len(live)-1)
			}
			return 0, nil
		},
	}
}

// Poison error texts: what the relay records as last_error for each kind.
const (
	// The broker's message.max.bytes refused the record batch.
	ErrTextTooLarge = "kafka server: Message was too large, server rejected it to avoid allocation error"
	// The producer refused a record over its MaxMessageBytes before
	// sending it. With the writer's default limit this should not happen;
	// it is accepted for the event just under that limit.
	ErrTextProducerLimit = "Attempt to produce message larger than configured Producer.MaxMessageBytes"
	// Auto-creation is off and the topic does not exist.
	ErrTextUnknownTopic = "kafka server: Request was for a topic or partition that does not exist on this broker"
	// Sarama's per-topic circuit breaker opens after three failed
	// metadata lookups of a topic and fails the next produces to it for
	// 10s with this text, without asking the broker: the later attempts of
	// an unknown-topic event record it as their last_error.
	ErrTextBreakerOpen = "circuit breaker is open"
)

// PoisonTopic is a topic the poison scenario's broker refuses.
const PoisonTopic = "no-such-topic"

// poisonKind is one way an event can be refused by the broker for good.
type poisonKind struct {
	topic    string
	errTexts []string // the last_error texts it may die of
	size     int      // payload bytes
	id       string   // set by emitPoison: the poison event's id
}

// poisonKinds are the poison events of the Poison and AdminOps faults.
func poisonKinds() []*poisonKind {
	return []*poisonKind{
		{topic: TopicGorm, errTexts: []string{ErrTextTooLarge}, size: 300 << 10},
		// Just under the writer's limit: the writer accepts it, and so
		// would Kafka's default limit, but not this broker's.
		{topic: TopicGorm, errTexts: []string{ErrTextTooLarge, ErrTextProducerLimit}, size: txoutbox.MaxPayloadBytesDefault - 1024},
		{topic: PoisonTopic, errTexts: []string{ErrTextUnknownTopic, ErrTextBreakerOpen}, size: 64},
	}
}

// emitPoison writes a poison aggregate agg: an event before, the poison
// event of kind (its id is stored in kind.id), two after, each in its own
// transaction, a little apart.
func emitPoison(ctx context.Context, w *World, agg string, kind *poisonKind) error {
	events := []txoutbox.Event{
		jsonEvent(TopicGorm, agg, "poison.before", 64),
		jsonEvent(kind.topic, agg, "poison.bad", kind.size),
		jsonEvent(TopicGorm, agg, "poison.after", 64),
		jsonEvent(TopicGorm, agg, "poison.after", 64),
	}
	kind.id = events[1].ID.String()
	for _, ev := range events {
		if err := w.Writers.Emit(ctx, ev); err != nil {
			return err
		}
		if !sleep(ctx, w.Env.Duration(0, 100*time.Millisecond)) {
			return ctx.Err()
		}
	}
	return nil
}

// Poison mixes poison events into a normal load: payloads over the
// broker's message.max.bytes (256 KiB here), payloads just under the
// writer's limit (which Kafka's default limit would accept) and a
// topic the broker refuses (auto-creation off). Each goes on a poison
// aggregate between normal events of that aggregate. They must end dead
// with their error, every other event must arrive, and the aggregate's
// later events must flow past the dead one (the fence policy).
func Poison(s Size, perKind int) Plan {
	flags := NoRelayFaultFlags()
	flags.MaxAttempts = 4
	flags.BackoffMin, flags.BackoffMax = 100*time.Millisecond, time.Second
	want := map[string][]string{} // poison event id -> the error texts it may die of
	return Plan{
		Name:   "poison",
		Relays: 3,
		Flags:  flags,
		Broker: BrokerConfig{Topics: []string{TopicEnt, TopicGorm}, NoAutoCreate: true, MaxMessageBytes: 256 << 10},
		Write:  writeLoad(s),
		Fault: func(ctx context.Context, w *World) (int, error) {
			for i := 0; i < perKind; i++ {
				for k, kind := range poisonKinds() {
					agg := fmt.Sprintf("poison-%d-%d", k, i)
					if err := emitPoison(ctx, w, agg, kind); err != nil {
						return 0, err
					}
					want[kind.id] = kind.errTexts
				}
				if !sleep(ctx, s.Over/time.Duration(perKind)) {
					return 0, ctx.Err()
				}
			}
			return 0, nil
		},
		Check: func(_ context.Context, _ *World, res *Result) error {
			var errs []error
			for _, d := range res.DeadEvents {
				texts, ok := want[d.EventID]
				switch {
				case !ok:
					errs = append(errs, fmt.Errorf("innocent event %s (%s key %q) is dead: %s", d.EventID, d.Topic, d.AggregateID, d.Error))
				case !containsAny(d.Error, texts):
					errs = append(errs, fmt.Errorf("poison %s (%s key %q) died of %q, want an error containing one of %q", d.EventID, d.Topic, d.AggregateID, d.Error, texts))
				case d.Delivered:
					errs = append(errs, fmt.Errorf("poison %s (%s key %q) is dead but on the broker", d.EventID, d.Topic, d.AggregateID))
				}
				delete(want, d.EventID)
			}
			for id, texts := range want {
				errs = append(errs, fmt.Errorf("poison %s (want one of %q) is not dead", id, texts))
			}
			return errors.Join(errs...)
		},
	}
}
