package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay/internal/confcheck"
)

// Defaults of Config, used where a field is left zero.
const (
	BatchSizeDefault         = 1000
	BatchBytesDefault        = 32 << 20
	LanesDefault             = 64
	LaneBatchDefault         = 64
	PollIntervalDefault      = time.Second
	ClaimCooldownDefault     = 25 * time.Millisecond
	LeaseDurationDefault     = 30 * time.Second
	MaxAttemptsDefault       = 10
	BackoffMinDefault        = time.Second
	BackoffMaxDefault        = 5 * time.Minute
	OutageBackoffMaxDefault  = 30 * time.Second
	HeartbeatIntervalDefault = 2 * time.Second
	StaleAfterDefault        = 15 * time.Second
	RetentionDefault         = 7 * 24 * time.Hour
	PruneIntervalDefault     = time.Minute
	PruneBatchDefault        = 1000
	StatsIntervalDefault     = 10 * time.Second
	FlushIntervalDefault     = 5 * time.Millisecond
	StatementTimeoutDefault  = 10 * time.Second
	LockTimeoutDefault       = 200 * time.Millisecond
	PublishTimeoutDefault    = time.Minute
)

// PollIntervalMySQLDefault is PollInterval's default on MySQL and
// MariaDB, which have no LISTEN/NOTIFY: polling is the relay's only way to
// find new rows there, so its interval is the latency a quiet outbox adds
// from commit to publish. A poll that finds nothing due is one indexed
// statement outside any transaction.
const PollIntervalMySQLDefault = 50 * time.Millisecond

// Floors of Config: the least value of a field that Validate and New
// accept (zero takes the default). Every count's floor is 1, and a field
// bounded by another is at least that one: MaxInFlight BatchSize,
// MaxInFlightBytes BatchBytes, BackoffMax BackoffMin, LeaseDuration
// HeartbeatInterval, StaleAfter twice HeartbeatInterval. Retention has no
// floor. The floors refuse values no relay works with (a unit slip: 1ms
// for 1s), not values that are merely unwise.
const (
	// PollIntervalFloor is the pace the relay polls at by itself while
	// rows keep coming: a fallback poll more often finds nothing sooner.
	PollIntervalFloor = 10 * time.Millisecond
	// ClaimCooldownFloor: a shorter cooldown claims as soon as woken.
	ClaimCooldownFloor = time.Millisecond
	// HeartbeatIntervalFloor: a heartbeat round is up to seven statements,
	// and a claim floor round runs as often; more often, they run back to
	// back.
	HeartbeatIntervalFloor = 50 * time.Millisecond
	// StaleAfterFloor: a relay whose heartbeat is late by StaleAfter (a GC
	// pause, a statement queued on a busy server) is declared dead and
	// loses its shards; under a second, live relays would.
	StaleAfterFloor = time.Second
	// BackoffMinFloor and OutageBackoffMaxFloor: a shorter delay retries
	// no sooner, since the next claim comes after a round trip anyway.
	BackoffMinFloor       = time.Millisecond
	OutageBackoffMaxFloor = time.Millisecond
	// PruneIntervalFloor and StatsIntervalFloor, as PollIntervalFloor: a
	// round of statements more often than that serves nothing.
	PruneIntervalFloor = 10 * time.Millisecond
	StatsIntervalFloor = 10 * time.Millisecond
	// FlushIntervalFloor: acknowledgements that arrive together need
	// that long to be marked by one statement.
	FlushIntervalFloor = time.Millisecond
	// StatementTimeoutFloor leaves a statement a round trip to a loaded
	// server, and the server its own timeouts set a quarter shorter; at a
	// few milliseconds no heartbeat completes and the relay never
	// registers.
	StatementTimeoutFloor = 100 * time.Millisecond
	// PublishTimeoutFloor leaves a publish a round trip to the broker and
	// its replication; below it every publish counts as failed.
	PublishTimeoutFloor = 100 * time.Millisecond
	// LockTimeoutFloor: below it, locks held for moments in the ordinary
	// course (autovacuum truncating the table gives way to a waiter within
	// 20ms, a partition created ahead, a peer's shard update) would lock
	// tables out for nothing. LockTimeout is at most StatementTimeout.
	LockTimeoutFloor = 100 * time.Millisecond
)

// Config configures a Relay. The zero value is valid: every zero field
// takes its documented default. A field below its floor (see the Floor
// constants) is refused.
type Config struct {
	// Table is the outbox table. Default: "outbox" on the search_path.
	Table txoutbox.Table

	// ID names this relay. It may stay the same across restarts (a
	// StatefulSet pod name, a systemd unit), but must be unique among
	// running relays: a relay that starts under an id declares the
	// earlier incarnation of that id dead and takes over its work at once.
	// In the relays table, lease_owner and the shards' owner each run
	// appears as "<ID>#<random>" (on MySQL, lease_owner holds the first 16
	// bytes of that token's SHA-256). Default: host-pid-random, fresh for
	// every New.
	ID string

	// BatchSize is the most rows one claim takes. Default 1000; at least
	// 1.
	BatchSize int

	// BatchBytes is the most payload bytes one claim takes: a claim stops
	// before the row that would pass it, but always takes at least one
	// row. Default 32 MiB; at least 1.
	BatchBytes int64

	// MaxInFlightBytes bounds the payload bytes of the claimed rows held
	// in memory, as MaxInFlight bounds their number; a row larger than
	// the room left is claimed alone once nothing else is held. The relay
	// holds about three times the payloads it has in flight (the rows,
	// the messages, the publisher's requests): the defaults keep a relay
	// with events of up to a MiB under 512 MiB. Default 2 × BatchBytes;
	// at least BatchBytes.
	MaxInFlightBytes int64

	// Lanes is how many events are published concurrently. Events are
	// spread over lanes by aggregate id, so one aggregate's events are
	// published one after another, in order, while the broker sees up to
	// Lanes requests in flight. Default 64; at least 1.
	Lanes int

	// LaneBatch is the most events a lane hands its publisher at once, when
	// the publisher is a BatchPublisher (kafkapub's is): the events queued
	// in the lane, of distinct aggregates, go out together, so the broker
	// sees up to Lanes × LaneBatch events in flight. 1 sends one event at
	// a time. Default 64; at least 1.
	LaneBatch int

	// MaxInFlight bounds the claimed rows held in memory: the relay claims
	// more only while fewer are waiting to be published and recorded. It
	// is also the most events one crash can publish twice. Default
	// 2 × BatchSize, so the next batch is claimed while one publishes:
	// the relay then claims a full batch once one's worth of room frees
	// up (half a batch's worth below 2 × BatchSize). At least BatchSize.
	MaxInFlight int

	// PollInterval is how often the relay looks for due rows when nothing
	// woke it: the fallback behind LISTEN/NOTIFY, and the only way rows in
	// retry backoff and events scheduled for later (txoutbox.Event.NotBefore)
	// are found once due, so it is the precision of their timing. Default
	// 1s on PostgreSQL; on MySQL and MariaDB, which have no NOTIFY,
	// PollIntervalMySQLDefault (50ms), or ClaimCooldown if longer. At
	// least PollIntervalFloor (10ms).
	PollInterval time.Duration

	// ClaimCooldown is the least time from the start of a claim that came
	// back short (fewer rows than it could take) to the next claim. While
	// the service writes a steady stream, each NOTIFY would otherwise
	// start a claim of the few rows committed since the last one, and each
	// claim and its mark cost PostgreSQL about the same however few rows
	// they carry: waiting gathers the rows of a cooldown into one claim.
	// A full claim is followed at once, so a backlog drains at full speed,
	// and a NOTIFY after a quiet spell longer than the cooldown is claimed
	// at once. It adds at most itself to the time from commit to publish.
	// Default 25ms; at least ClaimCooldownFloor (1ms), at most
	// PollInterval.
	ClaimCooldown time.Duration

	// DisableListen turns off LISTEN/NOTIFY wake-ups, for connections
	// through PgBouncer in transaction mode. The relay then polls every
	// PollInterval; lower it for latency.
	DisableListen bool

	// LeaseDuration is how long a claim holds rows before any relay may
	// claim them again. It backs up the relay's heartbeat: rows of a relay
	// that stopped heartbeating are taken over as soon as it is declared
	// dead. A publish that takes longer than the lease (a slow broker) is
	// not cut short before PublishTimeout: the row may be published twice,
	// never out of order, since a claim never passes over an earlier row
	// of the aggregate that another relay holds. Rows still waiting in a
	// lane when their lease is within a HeartbeatInterval of its end are
	// not published: they are given back, with their aggregate's later
	// rows, for a new claim. Default 30s; at least HeartbeatInterval.
	LeaseDuration time.Duration

	// MaxAttempts is how many failed publishes make an event dead, when
	// the last of them was the event's own fault: the broker refused that
	// message (see Permanent; kafkapub marks Kafka's refusals). A failure
	// for an outage (the broker, the network or the publisher away: any
	// error not marked permanent) counts as an attempt but never makes an
	// event dead, however long the outage lasts. Default 10; at least 1.
	MaxAttempts int

	// BackoffMin and BackoffMax bound the delay before a failed event is
	// retried: BackoffMin × 2^(attempts-1), capped at BackoffMax, with
	// jitter. Defaults 1s and 5m; BackoffMin at least BackoffMinFloor
	// (1ms), BackoffMax at least BackoffMin.
	BackoffMin, BackoffMax time.Duration

	// OutageBackoffMax caps the delay instead of BackoffMax after a
	// failure for an outage, so events resume soon after the broker is
	// back. Meanwhile the relay also backs off between claims. Default
	// 30s; at least OutageBackoffMaxFloor (1ms).
	OutageBackoffMax time.Duration

	// HeartbeatInterval is how often the relay refreshes its liveness and
	// rebalances shards. Default 2s; at least HeartbeatIntervalFloor
	// (50ms). The first round runs at start, the
	// second at a random point of the interval after it, and so do the
	// claim floor's rounds and the stats readings' second; the first prune
	// comes between one and two PruneIntervals after the start. Relays
	// started together (a Group's tables) then do not run them all at once.
	HeartbeatInterval time.Duration

	// StaleAfter is how old a relay's heartbeat may get before peers
	// declare it dead and take over its shards and claims. It must exceed
	// HeartbeatInterval comfortably. A relay that has not heartbeaten for
	// StaleAfter less one HeartbeatInterval (cut off from the database,
	// paused) stops publishing and drops the events it holds, before its
	// peers may take them over; it registers anew once it reaches the
	// database again. Default 15s; at least StaleAfterFloor (1s) and twice
	// HeartbeatInterval.
	StaleAfter time.Duration

	// Retention is how long published rows are kept before they are
	// pruned. Dead rows are never pruned. Default 7 days. Negative
	// disables pruning. Pruning assumes an event's CreatedAt is not in the
	// future: it stops at the first row created inside the window, so a
	// row stamped far ahead holds back pruning of the rows after it. Any
	// value is accepted.
	Retention time.Duration

	// PruneInterval is how often pruning runs; PruneBatch how many rows
	// one delete removes. Defaults 1m and 1000; at least
	// PruneIntervalFloor (10ms) and 1.
	PruneInterval time.Duration
	PruneBatch    int

	// FlushInterval is how long acknowledged events may wait to be marked
	// published together, so one statement marks many. It delays only the
	// bookkeeping, not the publishing. Default 5ms; at least
	// FlushIntervalFloor (1ms).
	FlushInterval time.Duration

	// StatementTimeout bounds every statement the relay runs, and on the
	// server its transactions' statements, lock waits and idle time
	// (statement_timeout, lock_timeout, idle_in_transaction_session_timeout
	// set locally), so a relay frozen or cut off inside a transaction
	// releases its locks, and no relay waits on a peer's locks for long.
	// The server's statement and lock timeouts are set short of the
	// client's deadline (by a quarter of the time left, at most a second),
	// so the server ends a statement that waits too long and its
	// connection stays open.
	// Default 10s; at least StatementTimeoutFloor (100ms).
	StatementTimeout time.Duration

	// LockTimeout is how long a statement of the relay waits for a lock
	// another session holds on its table or the table's companions (a
	// DBA's ALTER TABLE, a VACUUM FULL, CREATE INDEX, a stuck migration,
	// an operator's retry holding the claim gate) before the server ends
	// it (lock_timeout, set in each of the relay's transactions, the
	// statement's own parse included). The table is then locked out: the
	// relay runs nothing on it but a probe that takes those locks without
	// waiting, every backoff step up to HeartbeatInterval, and resumes at
	// once when the probe passes. Meanwhile it logs the lock once (at
	// Warn, with the table, and at Info when it is gone), counts it
	// (txoutbox.relay.lock_timeouts, txoutbox.relay.locked.duration) and
	// reports it in Health.Locked. In a Group, a locked table so holds a
	// connection for LockTimeout at its start, then for a moment each
	// step, and the pool and claim connections stay the other tables'.
	// Its heartbeats stop with the rest, so after StaleAfter it registers
	// anew once the lock is gone (events it held are published again, at
	// least once, in order). At least LockTimeoutFloor (100ms), at most
	// StatementTimeout; a statement's lock timeout is cut to three
	// quarters of its own statement timeout on the server, so that a
	// wait on a lock ends as a lock timeout. Default 200ms (StatementTimeout if shorter): the
	// relay's statements take milliseconds, and those of a Group's locked
	// tables that meet a lock first hold the shared connections (the
	// pool's, the claim connections every table's claims take turns on)
	// for as long as they wait.
	LockTimeout time.Duration

	// PublishTimeout bounds one publish call: one that has not returned
	// after it counts as failed with an unknown outcome (ErrPublishTimeout,
	// an outage: the event is retried, its aggregate fenced meanwhile, and
	// it may arrive twice). The lane that made the call sends nothing more
	// until the call returns. While such a call is outstanding and nothing
	// was acknowledged for PublishTimeout, the relay cannot make progress:
	// it reports Health.Stalled (outbox relay's /readyz fails), gives up its
	// shards and claims so its peers take them over, and joins again once
	// the call returns. It must exceed the publisher's own timeouts (with
	// kafkapub, Config.Timeout and Sarama's retries). Default 1m; at least
	// PublishTimeoutFloor (100ms).
	PublishTimeout time.Duration

	// StatsInterval is how often the lag gauge is refreshed from the
	// database, and the backlog and dead gauges while counting the rows is
	// quick: a count reads up to txoutbox.StatsExactMax index entries and
	// estimates beyond, and one whose statement took d (of 25 ms or more)
	// runs again no sooner than a hundred times d after it started, so that
	// a slow server is not loaded further. Default 10s; at least
	// StatsIntervalFloor (10ms).
	StatsInterval time.Duration

	// Logger receives the relay's logs, each record with the attributes
	// relay (ID) and table ("schema.name", as the txoutbox.table metric
	// attribute), in a Group too. Default: slog.Default().
	Logger *slog.Logger

	// MeterProvider provides the relay's metrics. Default: the global
	// provider (otel.GetMeterProvider), which records nothing until the
	// application sets one.
	MeterProvider metric.MeterProvider

	// TracerProvider provides the relay's publish spans. Default: the
	// global provider (otel.GetTracerProvider), looked up at each publish;
	// while no application has set one, or with a no-op provider, the
	// relay does no tracing work per event.
	TracerProvider trace.TracerProvider

	// Propagator reads the trace context the writer stored in an event's
	// headers, which the publish span links to. Default: the global
	// propagator, or W3C trace context (the writer's default) while none is
	// set.
	Propagator propagation.TextMapPropagator

	// MessagingSystem is the publish spans' messaging.system. Default:
	// known from the publisher ("kafka" for kafkapub and watermill-kafka, "rabbitmq" for
	// watermill-amqp, ...), "_OTHER" otherwise.
	MessagingSystem string

	// CloudEvents adds CloudEvents binary-mode headers to every message
	// when enabled. Off by default.
	CloudEvents CloudEventsConfig

	// LargePayloads turns on a claim check for events too large for the
	// broker: their payloads go to object storage and a small reference
	// record is published instead. Off by default (Store nil).
	LargePayloads LargePayloadsConfig
}

// ErrInvalidConfig is matched by every error New returns for a bad Config.
var ErrInvalidConfig = errors.New("relay: invalid config")

func (c *Config) setDefaults() {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomSuffix())
	}
	confcheck.Default(&c.BatchSize, BatchSizeDefault)
	confcheck.Default(&c.Lanes, LanesDefault)
	confcheck.Default(&c.LaneBatch, LaneBatchDefault)
	confcheck.Default(&c.MaxInFlight, 2*max(c.BatchSize, 0))
	confcheck.Default(&c.BatchBytes, BatchBytesDefault)
	confcheck.Default(&c.MaxInFlightBytes, 2*max(c.BatchBytes, 0))
	confcheck.Default(&c.PollInterval, PollIntervalDefault)
	confcheck.Default(&c.ClaimCooldown, min(ClaimCooldownDefault, max(c.PollInterval, 0)))
	confcheck.Default(&c.LeaseDuration, LeaseDurationDefault)
	confcheck.Default(&c.MaxAttempts, MaxAttemptsDefault)
	confcheck.Default(&c.BackoffMin, BackoffMinDefault)
	confcheck.Default(&c.BackoffMax, BackoffMaxDefault)
	confcheck.Default(&c.OutageBackoffMax, OutageBackoffMaxDefault)
	confcheck.Default(&c.HeartbeatInterval, HeartbeatIntervalDefault)
	confcheck.Default(&c.StaleAfter, StaleAfterDefault)
	confcheck.Default(&c.Retention, RetentionDefault)
	confcheck.Default(&c.PruneInterval, PruneIntervalDefault)
	confcheck.Default(&c.PruneBatch, PruneBatchDefault)
	confcheck.Default(&c.StatsInterval, StatsIntervalDefault)
	confcheck.Default(&c.FlushInterval, FlushIntervalDefault)
	confcheck.Default(&c.StatementTimeout, StatementTimeoutDefault)
	confcheck.Default(&c.LockTimeout, min(LockTimeoutDefault, max(c.StatementTimeout, 0)))
	confcheck.Default(&c.PublishTimeout, PublishTimeoutDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports whether c, with its zero fields taken as their
// defaults, is a configuration New accepts; the error matches
// ErrInvalidConfig. A command can check its configuration with it before
// it connects to anything. c itself is not changed.
func (c Config) Validate() error {
	c.setDefaults()
	return c.validate()
}

func (c *Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if err := c.Table.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if len(c.ID) > 200 {
		return bad("ID is longer than 200 bytes")
	}
	type n = confcheck.Field[int64]
	if err := confcheck.Floors(ErrInvalidConfig,
		n{Name: "BatchSize", V: int64(c.BatchSize), Floor: 1}, n{Name: "BatchBytes", V: c.BatchBytes, Floor: 1},
		n{Name: "Lanes", V: int64(c.Lanes), Floor: 1}, n{Name: "LaneBatch", V: int64(c.LaneBatch), Floor: 1},
		n{Name: "MaxInFlight", V: int64(c.MaxInFlight), Floor: 1}, n{Name: "MaxInFlightBytes", V: c.MaxInFlightBytes, Floor: 1},
		n{Name: "MaxAttempts", V: int64(c.MaxAttempts), Floor: 1}, n{Name: "PruneBatch", V: int64(c.PruneBatch), Floor: 1},
	); err != nil {
		return err
	}
	type d = confcheck.Field[time.Duration]
	if err := confcheck.Floors(ErrInvalidConfig,
		d{Name: "PollInterval", V: c.PollInterval, Floor: PollIntervalFloor}, d{Name: "ClaimCooldown", V: c.ClaimCooldown, Floor: ClaimCooldownFloor},
		d{Name: "HeartbeatInterval", V: c.HeartbeatInterval, Floor: HeartbeatIntervalFloor},
		d{Name: "StaleAfter", V: c.StaleAfter, Floor: StaleAfterFloor}, d{Name: "BackoffMin", V: c.BackoffMin, Floor: BackoffMinFloor},
		d{Name: "OutageBackoffMax", V: c.OutageBackoffMax, Floor: OutageBackoffMaxFloor}, d{Name: "PruneInterval", V: c.PruneInterval, Floor: PruneIntervalFloor},
		d{Name: "StatsInterval", V: c.StatsInterval, Floor: StatsIntervalFloor}, d{Name: "FlushInterval", V: c.FlushInterval, Floor: FlushIntervalFloor},
		d{Name: "StatementTimeout", V: c.StatementTimeout, Floor: StatementTimeoutFloor}, d{Name: "LockTimeout", V: c.LockTimeout, Floor: LockTimeoutFloor},
		d{Name: "PublishTimeout", V: c.PublishTimeout, Floor: PublishTimeoutFloor},
	); err != nil {
		return err
	}
	// The floors set by other fields.
	if err := confcheck.Floors(ErrInvalidConfig,
		n{Name: "MaxInFlight", V: int64(c.MaxInFlight), Floor: int64(c.BatchSize), Of: "BatchSize"},
		n{Name: "MaxInFlightBytes", V: c.MaxInFlightBytes, Floor: c.BatchBytes, Of: "BatchBytes"},
	); err != nil {
		return err
	}
	if err := confcheck.Floors(ErrInvalidConfig,
		d{Name: "BackoffMax", V: c.BackoffMax, Floor: c.BackoffMin, Of: "BackoffMin"}, d{Name: "LeaseDuration", V: c.LeaseDuration, Floor: c.HeartbeatInterval, Of: "HeartbeatInterval"},
		d{Name: "StaleAfter", V: c.StaleAfter, Floor: 2 * c.HeartbeatInterval, Of: "twice HeartbeatInterval"},
	); err != nil {
		return err
	}
	if err := c.LargePayloads.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.ClaimCooldown > c.PollInterval {
		return bad("ClaimCooldown %s is longer than PollInterval (%s), which claims first", c.ClaimCooldown, c.PollInterval)
	}
	if c.LockTimeout > c.StatementTimeout {
		return bad("LockTimeout %s is longer than StatementTimeout (%s), which ends every statement first", c.LockTimeout, c.StatementTimeout)
	}
	return nil
}
