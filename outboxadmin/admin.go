package outboxadmin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/migrations"
)

// StaleAfterDefault is Config.StaleAfter's default, the relays' own
// default (relay.StaleAfterDefault; a test keeps them equal).
const StaleAfterDefault = 15 * time.Second

// ReplayBatchDefault is Config.ReplayBatch's default.
const ReplayBatchDefault = 1000

// LookupWindowDefault is Config.LookupWindow's default: a walk of that many
// rows of the primary key takes tens of milliseconds.
const LookupWindowDefault = 100_000

// StatementTimeoutDefault is Config.StatementTimeout's default.
const StatementTimeoutDefault = 30 * time.Second

var (
	// ErrInvalidConfig is matched by every error New returns for a bad
	// Config.
	ErrInvalidConfig = errors.New("outboxadmin: invalid config")

	// ErrNoSelection is returned by Retry and Drop for a Filter that
	// selects nothing explicitly: no IDs, no filters and not All. A zero
	// Filter never means every event by accident.
	ErrNoSelection = errors.New("outboxadmin: no event ids or filters given (set All to select every dead event)")

	// ErrNotFound is returned by Event for an id with no row.
	ErrNotFound = errors.New("outboxadmin: no such event")

	// ErrWALStreamed is returned by Retry and Replay while a WAL relay's
	// slot may be streaming the table: a pgoutput slot named Config.Slot,
	// or found through the table: named as a publication that includes it
	// (the WAL relay's default pairing) or in the marker a WAL relay keeps
	// on such a publication. They return rows to
	// pending with an UPDATE, which the stream does not carry: the WAL
	// relay would never publish those rows, and its cleanup, or outbox wal
	// takeover, would take them for rows it had published. Hand the outbox
	// to the polling relay first (walrelay.Takeover, `outbox wal
	// takeover`), which drops the slot.
	ErrWALStreamed = errors.New("outboxadmin: a WAL relay's slot streams the outbox table")
)

// Config configures an Admin. The zero value is valid.
type Config struct {
	// Table is the outbox table. Default: "outbox" on the search_path.
	Table txoutbox.Table

	// Slot is the WAL relay's replication slot, which Status reports when
	// it exists in the database, and while which Retry and Replay refuse
	// (ErrWALStreamed). Default: the WAL relay's slot of Table in this
	// database, found through the table: of the WAL relay's default name
	// (walrelay.SlotDefault), of an earlier version's default name
	// (txoutbox_<schema>_<table>), or named in the marker a WAL relay
	// keeps on a publication of the table, whatever its name. Set it for a
	// slot of another name made by a relay of a version before the
	// marker. A slot of another database is never this one's.
	Slot string

	// StaleAfter is how old a relay's heartbeat may be for Status to count
	// it alive. Use the relays' Config.StaleAfter. Default 15s.
	StaleAfter time.Duration

	// ReplayBatch is about how many rows one replay transaction returns to
	// pending: whole aggregates, so a larger aggregate makes a larger
	// transaction. Default 1000.
	ReplayBatch int

	// LookupWindow is how many of the newest rows Lookup searches for
	// published events (it finds unpublished and dead ones anywhere).
	// Default LookupWindowDefault.
	LookupWindow int

	// StatementTimeout bounds each statement, lock wait and idle moment of
	// the operator transactions (retry, drop, replay), so an operator
	// never holds rows the relays wait behind for long. Default 30s.
	StatementTimeout time.Duration
}

// schemaVersion is the outbox schema version an Admin needs: Status reads
// version 7's not_before, and Retry and Replay lower version 8's claim
// floor.
const schemaVersion = 8

// Admin runs operator tasks on one outbox. It is safe for concurrent use.
type Admin struct {
	db       *sql.DB
	cfg      Config
	sql      statements
	schema   *migrations.Migrator // checks the table's schema version
	schemaOK atomic.Bool          // a check passed
}

// New validates cfg and returns an Admin working on db.
func New(db *sql.DB, cfg Config) (*Admin, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrInvalidConfig)
	}
	names, err := outboxsql.NamesFor(cfg.Table.Schema, cfg.Table.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if cfg.StaleAfter < 0 {
		return nil, fmt.Errorf("%w: StaleAfter is negative (%s)", ErrInvalidConfig, cfg.StaleAfter)
	}
	if cfg.ReplayBatch < 0 {
		return nil, fmt.Errorf("%w: ReplayBatch is negative (%d)", ErrInvalidConfig, cfg.ReplayBatch)
	}
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = StaleAfterDefault
	}
	if cfg.ReplayBatch == 0 {
		cfg.ReplayBatch = ReplayBatchDefault
	}
	if cfg.LookupWindow < 0 {
		return nil, fmt.Errorf("%w: LookupWindow is negative (%d)", ErrInvalidConfig, cfg.LookupWindow)
	}
	if cfg.LookupWindow == 0 {
		cfg.LookupWindow = LookupWindowDefault
	}
	if cfg.StatementTimeout < 0 {
		return nil, fmt.Errorf("%w: StatementTimeout is negative (%s)", ErrInvalidConfig, cfg.StatementTimeout)
	}
	if cfg.StatementTimeout == 0 {
		cfg.StatementTimeout = StatementTimeoutDefault
	}
	schema, err := migrations.New(db, migrations.Config{Table: cfg.Table})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return &Admin{db: db, cfg: cfg, sql: render(names), schema: schema}, nil
}

// CheckSchema checks the table's schema: it returns an error matching
// migrations.ErrSchemaTooOld when a version up to 8 is not applied (run
// `outbox migrate up`), and one matching migrations.ErrSchemaTooNew,
// naming the version, when a version this release does not know is (see
// migrations.Migrator.Check). Every other method calls it first and
// returns its error, before it reads or changes anything; once a check has
// passed, it returns nil at once. Call it at start to fail there.
func (a *Admin) CheckSchema(ctx context.Context) error {
	if a.schemaOK.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	if err := a.schema.Check(ctx, schemaVersion); err != nil {
		return fmt.Errorf("outboxadmin: %w", err)
	}
	a.schemaOK.Store(true)
	return nil
}

// statements are the operator statements rendered for one table.
type statements struct {
	row, lockUnpublished, retry, lowerFloor, drop, wake, pruneLock string
	replaySelect, replay, timeouts, claimGate, relays, shards      string
	handovers, snapshot, lookupAggregate, lookupEventID            string
	walGate, walSlots, walSlot, table, lag, topicStats             string
	locks                                                          string
	// deadList, deadLock and deadCount are in one form per set of
	// filters (outboxsql.DeadFilters), each naming only those.
	deadList, deadLock, deadCount [outboxsql.DeadForms]string
}

// render renders the operator statements for the table of n, once, when
// the Admin is built.
func render(n outboxsql.Names) statements {
	st := statements{
		row:             n.Render(outboxsql.OpsRow),
		lockUnpublished: n.Render(outboxsql.OpsLockUnpublished),
		retry:           n.Render(outboxsql.OpsRetry),
		lowerFloor:      n.Render(outboxsql.OpsLowerFloor),
		drop:            n.Render(outboxsql.OpsDrop),
		wake:            n.Render(outboxsql.OpsWake),
		pruneLock:       n.Render(outboxsql.OpsPruneLock),
		replaySelect:    n.Render(outboxsql.OpsReplaySelect),
		replay:          n.Render(outboxsql.OpsReplay),
		timeouts:        outboxsql.OpsTimeouts,
		claimGate:       n.Render(outboxsql.OpsClaimGate),
		relays:          n.Render(outboxsql.OpsRelays),
		shards:          n.Render(outboxsql.OpsShards),
		handovers:       n.Render(outboxsql.OpsHandovers),
		snapshot:        n.Render(outboxsql.OpsSnapshotScheduled),
		lookupAggregate: n.Render(outboxsql.OpsLookupAggregate),
		lookupEventID:   n.Render(outboxsql.OpsLookupEventID),
		walGate:         outboxsql.OpsWALGate,
		walSlots:        outboxsql.OpsWALSlots,
		walSlot:         outboxsql.WALSlot,
		table:           n.Table,
		lag:             n.Render(outboxsql.StatsLag),
		topicStats:      n.Render(outboxsql.TopicStats),
		locks:           n.Render(outboxsql.OpsLocks),
	}
	for f := range st.deadList {
		st.deadList[f] = n.Render(outboxsql.OpsDeadList(outboxsql.DeadFilters(f)))
		st.deadLock[f] = n.Render(outboxsql.OpsDeadLock(outboxsql.DeadFilters(f)))
		st.deadCount[f] = n.Render(outboxsql.OpsDeadCount(outboxsql.DeadFilters(f)))
	}
	return st
}
