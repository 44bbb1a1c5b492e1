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
	// Table is the outbox table. Default: "outbox" on the search_path
	// (on MySQL, in the connection's database: Table.Schema is refused).
	Table txoutbox.Table

	// Slot is the WAL relay's replication slot, which Status reports when
	// it exists in the database, and while which Retry and Replay refuse
	// (ErrWALStreamed). Default: the WAL relay's slot of Table in this
	// database, found through the table: of the WAL relay's default name
	// (walrelay.SlotDefault), of an earlier version's default name
	// (txoutbox_<schema>_<table>), or named in the marker a WAL relay
	// keeps on a publication of the table, whatever its name. Set it for a
	// slot of another name made by a relay of a version before the
	// marker. A slot of another database is never this one's. MySQL has
	// no WAL relay: New refuses a Slot there.
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
	// Default LookupWindowDefault. On MySQL FindEvents finds published
	// events of any age, and LookupWindow has no effect.
	LookupWindow int

	// StatementTimeout bounds each statement, lock wait and idle moment of
	// the operator transactions (retry, drop, replay), so an operator
	// never holds rows the relays wait behind for long, and each read.
	// Default 30s. On MySQL the lock waits and the idle limit are whole
	// seconds, at least one (innodb_lock_wait_timeout, wait_timeout), and
	// the statement time limit is the server's (MySQL's
	// max_execution_time bounds SELECTs, MariaDB's max_statement_time
	// every statement).
	StatementTimeout time.Duration
}

// schemaVersion is the outbox schema version an Admin needs on
// PostgreSQL: Status reads version 7's not_before, and Retry and Replay
// lower version 8's claim floor.
const schemaVersion = 8

// mysqlSchemaVersion is the MySQL outbox schema version an Admin needs:
// the first, which has every column and index its statements read.
const mysqlSchemaVersion = 1

// Admin runs operator tasks on one outbox. It is safe for concurrent use.
type Admin struct {
	db       adminDB
	dialect  txoutbox.Dialect
	cfg      Config
	schema   *migrations.Migrator // checks the table's schema version
	schemaOK atomic.Bool          // a check passed
}

// New validates cfg and returns an Admin working on db. The database is
// PostgreSQL, or MySQL 8.0+ or MariaDB 10.6+, detected as
// txoutbox.DetectDialect does (the driver's type; for a driver it does
// not know, one query of the server's version, bounded by 10 seconds).
func New(db *sql.DB, cfg Config) (*Admin, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrInvalidConfig)
	}
	dialect, err := detectDialect(db)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	onMySQL := dialect == txoutbox.MySQL
	names, err := outboxsql.NamesForDialect(outboxsql.Dialect(dialect), cfg.Table.Schema, cfg.Table.Name)
	if err != nil {
		if onMySQL {
			return nil, fmt.Errorf("%w: %w (see docs/mysql.md)", ErrInvalidConfig, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if onMySQL && cfg.Slot != "" {
		return nil, fmt.Errorf("%w: Slot %q: MySQL has no WAL relay (see docs/mysql.md)", ErrInvalidConfig, cfg.Slot)
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
	schema, err := migrations.New(db, migrations.Config{Table: cfg.Table, Dialect: dialect})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	a := &Admin{dialect: dialect, cfg: cfg, schema: schema}
	if onMySQL {
		a.db = newMySQLAdminDB(db, names, cfg.StatementTimeout)
	} else {
		a.db = &pgAdminDB{db: db, table: cfg.Table, slotName: a.slotName(), configSlot: cfg.Slot, sql: render(names)}
	}
	return a, nil
}

// detectDialect is txoutbox.DetectDialect, bounded: a probe of the server
// for a driver DialectOf does not know, as migrations.New makes.
func detectDialect(db *sql.DB) (txoutbox.Dialect, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return txoutbox.DetectDialect(ctx, db)
}

// slotName is the slot name OpsWALSlots looks for besides those it finds
// through the table: Config.Slot, or the WAL relay's default name of
// before the names were keyed by the database (OpsWALSlots computes
// today's).
func (a *Admin) slotName() string {
	if a.cfg.Slot != "" {
		return a.cfg.Slot
	}
	return outboxsql.WALLegacyName(a.cfg.Table.Schema, a.cfg.Table.Name)
}

// CheckSchema checks the table's schema: it returns an error matching
// migrations.ErrSchemaTooOld when a version up to 8 (on MySQL, version 1
// of its series) is not applied (run `outbox migrate up`), and one
// matching migrations.ErrSchemaTooNew,
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
	need := schemaVersion
	if a.dialect == txoutbox.MySQL {
		need = mysqlSchemaVersion
	}
	if err := a.schema.Check(ctx, need); err != nil {
		return fmt.Errorf("outboxadmin: %w", err)
	}
	a.schemaOK.Store(true)
	return nil
}
