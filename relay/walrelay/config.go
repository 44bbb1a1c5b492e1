package walrelay

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/internal/confcheck"
)

// Defaults of Config, used where a field is left zero. Those that mean
// what the polling relay's fields of the same name mean are its defaults.
const (
	LanesDefault            = relay.LanesDefault
	LaneBatchDefault        = relay.LaneBatchDefault
	MaxInFlightDefault      = 2000
	MaxAttemptsDefault      = relay.MaxAttemptsDefault
	BackoffMinDefault       = relay.BackoffMinDefault
	BackoffMaxDefault       = relay.BackoffMaxDefault
	PingIntervalDefault     = time.Second
	SenderTimeoutDefault    = 10 * time.Second
	StandbyRetryDefault     = time.Second
	CleanupIntervalDefault  = 2 * time.Second
	CleanupBatchDefault     = 1000
	StatementTimeoutDefault = relay.StatementTimeoutDefault
	StatsIntervalDefault    = relay.StatsIntervalDefault

	// FlushIntervalDefault is not the polling relay's 5ms, on purpose: there
	// the interval delays marking acknowledged rows published, so that one
	// UPDATE marks many; here it paces the status updates that confirm
	// the slot's position, a message on the replication connection each,
	// and the events settled within it are among those a crash publishes
	// twice (see MaxInFlight). 10ms keeps that to a hundredth of a second
	// of events while a busy stream sends half the updates 5ms would.
	FlushIntervalDefault = 10 * time.Millisecond
)

// Floors of Config, as the polling relay's (relay.PollIntervalFloor and
// the others): the least value of a field that Validate and New accept
// (zero takes the default). Every count's floor is 1; BackoffMax is at
// least BackoffMin; Retention has no floor.
const (
	// BackoffMinFloor is the polling relay's.
	BackoffMinFloor = relay.BackoffMinFloor
	// FlushIntervalFloor: the confirmed position is reported to the
	// server no more often than that serves anyone.
	FlushIntervalFloor = time.Millisecond
	// PingIntervalFloor: a ping is a round trip on the replication
	// connection; more often than that, it only adds traffic.
	PingIntervalFloor = 10 * time.Millisecond
	// SenderTimeoutFloor: the relay gives its slot up after half of
	// SenderTimeout without a word from the server; under a second, a
	// busy server's late reply would make a live relay give it up.
	SenderTimeoutFloor = time.Second
	// StandbyRetryFloor: each try opens a replication connection.
	StandbyRetryFloor = 100 * time.Millisecond
	// CleanupIntervalFloor and StatsIntervalFloor: a round of statements
	// more often than that serves nothing.
	CleanupIntervalFloor = 10 * time.Millisecond
	StatsIntervalFloor   = 10 * time.Millisecond
	// StatementTimeoutFloor is the polling relay's.
	StatementTimeoutFloor = relay.StatementTimeoutFloor
)

// Config configures a Relay. Every zero field takes its documented
// default, and a field below its floor (see the Floor constants) is
// refused; the connection and the publisher are New's arguments, as the
// polling relay's database and publisher are relay.New's.
type Config struct {
	// Table is the outbox table. Default: "outbox" on the search_path.
	Table txoutbox.Table

	// Publication and Slot name the publication of the table's inserts and
	// the logical replication slot the relay reads them through. The relay
	// creates both if they do not exist, the publication on PostgreSQL 15
	// and later with a column list of the columns an event is built from
	// (id, event_id, topic, aggregate_type, aggregate_id, event_type,
	// content_type, payload, headers, created_at), so the server does not
	// encode and send the others; a publication of every column works too.
	//
	// A slot name is the server's, not the database's: an explicit Slot
	// must be unique on the server, and the relay refuses a slot of
	// another database (ErrSlotOtherDatabase). Empty, both take one default
	// name, which Run resolves on connecting (Relay.Slot reports it):
	// SlotDefault of the current database and of the table in the schema
	// it is found in, unique per database and table. A slot of the default
	// name of earlier versions ("txoutbox_<schema>_<table>", or
	// "txoutbox_<table>" for a table given without its schema) that exists
	// in this relay's database is kept, with its publication, so an
	// upgrade loses nothing; the relay logs that it kept it. One of that
	// name in another database is never used, and none is ever created:
	// once the kept slot is dropped, the relay goes on under the default
	// name.
	Publication string
	Slot        string

	// Failover creates the slot with failover => true (PostgreSQL 17 and
	// later), so standbys with sync_replication_slots keep it and a
	// promoted standby can go on from the slot's position. It applies
	// only when the relay creates the slot.
	Failover bool

	// Lanes is how many events are published concurrently. Events are
	// spread over lanes by aggregate id, so one aggregate's events are
	// published one after another, in commit order. Default 64; at least
	// 1.
	Lanes int

	// LaneBatch is the most events a lane hands the publisher at once
	// when it is a relay.BatchPublisher (kafkapub's is), as in the polling
	// relay: the events queued in the lane, of distinct aggregates, go out
	// together. 1 sends one event at a time. Default 64; at least 1.
	LaneBatch int

	// MaxInFlight bounds the events read from the slot whose position the
	// relay has not yet confirmed to the server: it stops reading while
	// that many are held. It is also, with the largest transaction and
	// the events settled in the last FlushInterval, the most events one
	// crash of the relay publishes twice. Default 2000; at least 1.
	MaxInFlight int

	// MaxAttempts is how many failed publishes make an event dead when
	// the last of them is the event's own fault (relay.IsPermanent: the
	// broker refused the message; kafkapub marks Kafka's refusals), as in
	// the polling relay: its row is marked dead and the aggregate's later
	// events go on. A failure for want of the broker never makes an event
	// dead, however long it lasts; the event is retried, and its
	// aggregate waits. A table-less event has no row: it is logged at
	// error level and dropped. Default 10; at least 1.
	MaxAttempts int

	// BackoffMin and BackoffMax bound the delay before a failed publish is
	// tried again: BackoffMin × 2^(attempts-1), capped at BackoffMax, with
	// jitter (between half of that and all of it), as in the polling
	// relay. Defaults 1s and 5m; BackoffMin at least BackoffMinFloor
	// (1ms), BackoffMax at least BackoffMin.
	BackoffMin, BackoffMax time.Duration

	// FlushInterval is how often the confirmed position is reported to
	// the server while it advances. Default 10ms (not the polling relay's
	// 5ms: see FlushIntervalDefault); at least FlushIntervalFloor (1ms).
	FlushInterval time.Duration

	// PingInterval is how often the relay asks the server for a reply,
	// to notice a dead connection; at most SenderTimeout/4. Default 1s;
	// at least PingIntervalFloor (10ms).
	PingInterval time.Duration

	// SenderTimeout is the server's wal_sender_timeout for the relay's
	// replication connection: how long the server keeps the slot for a
	// relay it hears nothing from, so how long standbys wait after the
	// active relay dies without closing its connection (a partition, a
	// frozen host). The relay gives the slot up itself when it has heard
	// nothing for half of it, before the server frees the slot for a
	// standby. A killed process closes its connection, and a standby takes
	// over within StandbyRetry. Default 10s; at least SenderTimeoutFloor
	// (1s).
	SenderTimeout time.Duration

	// StandbyRetry is how often a relay that finds the slot held by
	// another tries again. Default 1s; at least StandbyRetryFloor
	// (100ms).
	StandbyRetry time.Duration

	// Retention is how long rows of published events are kept. Zero (the
	// default) deletes them as soon as the slot has confirmed them, in
	// batches: the table holds only what is not yet confirmed (rows
	// already marked published, by the slot's setup or by the polling
	// relay before, are deleted too). A positive
	// Retention marks them published first, one batched UPDATE per
	// CleanupBatch rows, and deletes them after Retention, so `outbox
	// replay` and audits can read them. Negative marks them published and
	// never deletes them. Any value is accepted.
	Retention time.Duration

	// CleanupInterval is how often the cleanup looks for confirmed rows;
	// CleanupBatch is how many rows one statement removes. Defaults 2s and
	// 1000; at least CleanupIntervalFloor (10ms) and 1.
	CleanupInterval time.Duration
	CleanupBatch    int

	// StatementTimeout bounds every statement the relay runs on its
	// regular connections. Default 10s; at least StatementTimeoutFloor
	// (100ms).
	StatementTimeout time.Duration

	// CloudEvents adds CloudEvents binary-mode headers, as the polling
	// relay's option of that name does.
	CloudEvents relay.CloudEventsConfig

	// LargePayloads turns on a claim check for events too large for the
	// broker, as the polling relay's option of that name does: the
	// payload is stored before its reference is published, and a store
	// away holds the events back (retried with backoff, never dead) as a
	// broker away does. Off by default (Store nil).
	LargePayloads relay.LargePayloadsConfig

	// Logger receives the relay's logs. Default: slog.Default().
	Logger *slog.Logger

	// MeterProvider provides the relay's metrics: events published and
	// dead, the slot's lag in bytes (by wal_status), whether this relay
	// streams, and the polling relay's publish duration and messages sent,
	// under this package's instrumentation scope. Default: the global
	// provider.
	MeterProvider metric.MeterProvider

	// TracerProvider, Propagator and MessagingSystem are the polling
	// relay's options of those names (relay.Config): the provider of the
	// publish spans ("send <topic>", linked to the span that wrote the
	// event), under this package's instrumentation scope; the propagator
	// that reads the writer's trace context from the event's headers; and
	// the spans' messaging.system. Defaults: the global provider, looked
	// up at each publish (no tracing work per event while none is set);
	// the global propagator, or W3C trace context; known from Publisher.
	TracerProvider  trace.TracerProvider
	Propagator      propagation.TextMapPropagator
	MessagingSystem string

	// StatsInterval is how often the slot's lag and wal_status are read
	// for the metrics. Default 10s; at least StatsIntervalFloor (10ms).
	StatsInterval time.Duration
}

// SlotDefault is the default replication slot name of table in database:
// "txoutbox_<database>_<schema>_<table>" made of lower-case letters,
// digits and underscores (every other character becomes an underscore),
// cut to 41 bytes, then "_" and 12 hex digits of a SHA-256 of the three
// names, so it is unique on the server to the database and the table and
// fits PostgreSQL's 63 bytes whatever the names. An empty table.Schema
// stands for "public": for a table given without its schema, Run uses the
// schema the search_path finds it in, and Relay.Slot reports the name
// once Run has started. Slots of an earlier version's default name are
// kept (see Config.Slot).
func SlotDefault(database string, table txoutbox.Table) string {
	schema := table.Schema
	if schema == "" {
		schema = "public"
	}
	return outboxsql.WALName(database, schema, table.Name)
}

// PublicationDefault is the default publication name of table in
// database, the same as SlotDefault: a publication is the database's, but
// one name for both lets operators and the relay's checks pair them.
func PublicationDefault(database string, table txoutbox.Table) string {
	return SlotDefault(database, table)
}

// ErrInvalidConfig is matched by every error New returns for a bad
// connection string, a nil publisher or a bad Config.
var ErrInvalidConfig = errors.New("walrelay: invalid config")

// setDefaults sets every zero field to its default but Publication and
// Slot, whose defaults depend on the database (see resolveNames).
func (c *Config) setDefaults() {
	confcheck.Default(&c.Lanes, LanesDefault)
	confcheck.Default(&c.LaneBatch, LaneBatchDefault)
	confcheck.Default(&c.MaxInFlight, MaxInFlightDefault)
	confcheck.Default(&c.MaxAttempts, MaxAttemptsDefault)
	confcheck.Default(&c.BackoffMin, BackoffMinDefault)
	confcheck.Default(&c.BackoffMax, BackoffMaxDefault)
	confcheck.Default(&c.FlushInterval, FlushIntervalDefault)
	confcheck.Default(&c.PingInterval, PingIntervalDefault)
	confcheck.Default(&c.SenderTimeout, SenderTimeoutDefault)
	confcheck.Default(&c.StandbyRetry, StandbyRetryDefault)
	confcheck.Default(&c.CleanupInterval, CleanupIntervalDefault)
	confcheck.Default(&c.CleanupBatch, CleanupBatchDefault)
	confcheck.Default(&c.StatementTimeout, StatementTimeoutDefault)
	confcheck.Default(&c.StatsInterval, StatsIntervalDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports whether c, with its zero fields taken as their
// defaults, is a configuration New accepts (New also checks its
// connection string and publisher); the error matches ErrInvalidConfig.
// c itself is not changed.
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
	if err := c.LargePayloads.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.Publication != "" {
		if err := ident.Validate(c.Publication); err != nil {
			return bad("Publication: %v", err)
		}
	}
	if c.Slot != "" {
		if err := validSlotName(c.Slot); err != nil {
			return bad("Slot: %v", err)
		}
	}
	type n = confcheck.Field[int]
	if err := confcheck.Floors(ErrInvalidConfig, n{Name: "Lanes", V: c.Lanes, Floor: 1}, n{Name: "LaneBatch", V: c.LaneBatch, Floor: 1},
		n{Name: "MaxInFlight", V: c.MaxInFlight, Floor: 1}, n{Name: "MaxAttempts", V: c.MaxAttempts, Floor: 1}, n{Name: "CleanupBatch", V: c.CleanupBatch, Floor: 1},
	); err != nil {
		return err
	}
	type d = confcheck.Field[time.Duration]
	if err := confcheck.Floors(ErrInvalidConfig,
		d{Name: "BackoffMin", V: c.BackoffMin, Floor: BackoffMinFloor}, d{Name: "FlushInterval", V: c.FlushInterval, Floor: FlushIntervalFloor},
		d{Name: "PingInterval", V: c.PingInterval, Floor: PingIntervalFloor}, d{Name: "SenderTimeout", V: c.SenderTimeout, Floor: SenderTimeoutFloor},
		d{Name: "StandbyRetry", V: c.StandbyRetry, Floor: StandbyRetryFloor}, d{Name: "CleanupInterval", V: c.CleanupInterval, Floor: CleanupIntervalFloor},
		d{Name: "StatementTimeout", V: c.StatementTimeout, Floor: StatementTimeoutFloor}, d{Name: "StatsInterval", V: c.StatsInterval, Floor: StatsIntervalFloor},
		d{Name: "BackoffMax", V: c.BackoffMax, Floor: c.BackoffMin, Of: "BackoffMin"},
	); err != nil {
		return err
	}
	if c.PingInterval*4 > c.SenderTimeout {
		// The relay gives the slot up after SenderTimeout/2 of silence: a
		// ping every quarter of it leaves room for one reply to be late.
		return bad("PingInterval (%s) must be at most a quarter of SenderTimeout (%s), or a live relay loses its slot", c.PingInterval, c.SenderTimeout)
	}
	return nil
}

// validSlotName applies PostgreSQL's rule for replication slot names:
// lower-case letters, digits and underscores, at most 63 bytes.
func validSlotName(s string) error {
	if s == "" || len(s) > ident.MaxLen {
		return fmt.Errorf("%q must be 1 to %d bytes", s, ident.MaxLen)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return fmt.Errorf("%q may hold only lower-case letters, digits and underscores", s)
		}
	}
	return nil
}
