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
)

// Defaults of Config, used where a field is left zero.
const (
	LanesDefault            = 64
	LaneBatchDefault        = relay.LaneBatchDefault
	MaxInFlightDefault      = 2000
	MaxAttemptsDefault      = 10
	BackoffMinDefault       = time.Second
	BackoffMaxDefault       = 5 * time.Minute
	FlushIntervalDefault    = 10 * time.Millisecond
	PingIntervalDefault     = time.Second
	SenderTimeoutDefault    = 10 * time.Second
	StandbyRetryDefault     = time.Second
	CleanupIntervalDefault  = 2 * time.Second
	CleanupBatchDefault     = 1000
	StatementTimeoutDefault = 10 * time.Second
	StatsIntervalDefault    = 10 * time.Second
)

// Config configures a Relay. Every zero field takes its documented
// default; the connection and the publisher are New's arguments, as the
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
	// encode and send the others; a publication of every column works too. Default for both: PublicationDefault(Table) and
	// SlotDefault(Table), the same name.
	Publication string
	Slot        string

	// Failover creates the slot with failover => true (PostgreSQL 17 and
	// later), so standbys with sync_replication_slots keep it and a
	// promoted standby can go on from the slot's position. It applies
	// only when the relay creates the slot.
	Failover bool

	// Lanes is how many events are published concurrently. Events are
	// spread over lanes by aggregate id, so one aggregate's events are
	// published one after another, in commit order. Default 64.
	Lanes int

	// LaneBatch is the most events a lane hands the publisher at once
	// when it is a relay.BatchPublisher (kafkapub's is), as in the polling
	// relay: the events queued in the lane, of distinct aggregates, go out
	// together. 1 sends one event at a time. Default 64.
	LaneBatch int

	// MaxInFlight bounds the events read from the slot whose position the
	// relay has not yet confirmed to the server: it stops reading while
	// that many are held. It is also, with the largest transaction and
	// the events settled in the last FlushInterval, the most events one
	// crash of the relay publishes twice. Default 2000.
	MaxInFlight int

	// MaxAttempts is how many failed publishes make an event dead when
	// the last of them is the event's own fault (relay.IsPermanent: the
	// broker refused the message; kafkapub marks Kafka's refusals), as in
	// the polling relay: its row is marked dead and the aggregate's later
	// events go on. A failure for want of the broker never makes an event
	// dead, however long it lasts; the event is retried, and its
	// aggregate waits. A table-less event has no row: it is logged at
	// error level and dropped. Default 10.
	MaxAttempts int

	// BackoffMin and BackoffMax bound the delay before a failed publish is
	// tried again: BackoffMin × 2^(attempts-1), capped at BackoffMax, with
	// jitter (between half of that and all of it), as in the polling
	// relay. Defaults 1s and 5m.
	BackoffMin, BackoffMax time.Duration

	// FlushInterval is how often the confirmed position is reported to
	// the server while it advances. Default 10ms.
	FlushInterval time.Duration

	// PingInterval is how often the relay asks the server for a reply,
	// to notice a dead connection; at most SenderTimeout/4. Default 1s.
	PingInterval time.Duration

	// SenderTimeout is the server's wal_sender_timeout for the relay's
	// replication connection: how long the server keeps the slot for a
	// relay it hears nothing from, so how long standbys wait after the
	// active relay dies without closing its connection (a partition, a
	// frozen host). The relay gives the slot up itself when it has heard
	// nothing for half of it, before the server frees the slot for a
	// standby. A killed process closes its connection, and a standby takes
	// over within StandbyRetry. Default 10s.
	SenderTimeout time.Duration

	// StandbyRetry is how often a relay that finds the slot held by
	// another tries again. Default 1s.
	StandbyRetry time.Duration

	// Retention is how long rows of published events are kept. Zero (the
	// default) deletes them as soon as the slot has confirmed them, in
	// batches: the table holds only what is not yet confirmed (rows
	// already marked published, by the slot's setup or by the polling
	// relay before, are deleted too). A positive
	// Retention marks them published first, one batched UPDATE per
	// CleanupBatch rows, and deletes them after Retention, so `outbox
	// replay` and audits can read them. Negative marks them published and
	// never deletes them.
	Retention time.Duration

	// CleanupInterval is how often the cleanup looks for confirmed rows;
	// CleanupBatch is how many rows one statement removes. Defaults 2s and
	// 1000.
	CleanupInterval time.Duration
	CleanupBatch    int

	// StatementTimeout bounds every statement the relay runs on its
	// regular connections. Default 10s.
	StatementTimeout time.Duration

	// CloudEvents adds CloudEvents binary-mode headers, as the polling
	// relay's option of that name does.
	CloudEvents relay.CloudEventsConfig

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
	// for the metrics. Default 10s.
	StatsInterval time.Duration
}

// PublicationDefault is the default publication name of table:
// "txoutbox_<schema>_<name>" in lower case. For a table given without its
// schema Run uses the schema the search_path finds the table in, unless a
// publication "txoutbox_<name>" carrying the table exists (made by a
// relay before names were keyed by schema).
func PublicationDefault(table txoutbox.Table) string {
	return outboxsql.WALName(table.Schema, table.Name)
}

// SlotDefault is the default replication slot name of table, the same as
// PublicationDefault (and keyed by the schema in the same way).
func SlotDefault(table txoutbox.Table) string {
	return outboxsql.WALName(table.Schema, table.Name)
}

// ErrInvalidConfig is matched by every error New returns for a bad
// connection string, a nil publisher or a bad Config.
var ErrInvalidConfig = errors.New("walrelay: invalid config")

func (c *Config) setDefaults() {
	if c.Publication == "" {
		c.Publication = PublicationDefault(c.Table)
	}
	if c.Slot == "" {
		c.Slot = SlotDefault(c.Table)
	}
	setDefault(&c.Lanes, LanesDefault)
	setDefault(&c.LaneBatch, LaneBatchDefault)
	setDefault(&c.MaxInFlight, MaxInFlightDefault)
	setDefault(&c.MaxAttempts, MaxAttemptsDefault)
	setDefault(&c.BackoffMin, BackoffMinDefault)
	setDefault(&c.BackoffMax, BackoffMaxDefault)
	setDefault(&c.FlushInterval, FlushIntervalDefault)
	setDefault(&c.PingInterval, PingIntervalDefault)
	setDefault(&c.SenderTimeout, SenderTimeoutDefault)
	setDefault(&c.StandbyRetry, StandbyRetryDefault)
	setDefault(&c.CleanupInterval, CleanupIntervalDefault)
	setDefault(&c.CleanupBatch, CleanupBatchDefault)
	setDefault(&c.StatementTimeout, StatementTimeoutDefault)
	setDefault(&c.StatsInterval, StatsIntervalDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
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
	if err := ident.Validate(c.Publication); err != nil {
		if c.Publication == PublicationDefault(c.Table) {
			// Derived from a schema's name that is not plain: name the
			// publication and the slot instead.
			return bad("Publication: the default for the table %s, %v: set Publication and Slot", c.Table, err)
		}
		return bad("Publication: %v", err)
	}
	if err := validSlotName(c.Slot); err != nil {
		return bad("Slot: %v", err)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Lanes", c.Lanes}, {"LaneBatch", c.LaneBatch}, {"MaxInFlight", c.MaxInFlight}, {"MaxAttempts", c.MaxAttempts}, {"CleanupBatch", c.CleanupBatch}} {
		if f.v < 0 {
			return bad("%s is negative (%d)", f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"BackoffMin", c.BackoffMin}, {"BackoffMax", c.BackoffMax}, {"FlushInterval", c.FlushInterval}, {"PingInterval", c.PingInterval},
		{"SenderTimeout", c.SenderTimeout}, {"StandbyRetry", c.StandbyRetry}, {"CleanupInterval", c.CleanupInterval}, {"StatementTimeout", c.StatementTimeout}, {"StatsInterval", c.StatsInterval}} {
		if f.v < 0 {
			return bad("%s is negative (%s)", f.name, f.v)
		}
	}
	if c.BackoffMax < c.BackoffMin {
		return bad("BackoffMax (%s) is smaller than BackoffMin (%s)", c.BackoffMax, c.BackoffMin)
	}
	if c.SenderTimeout < time.Second {
		return bad("SenderTimeout (%s) is under 1s", c.SenderTimeout)
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
