package migrations

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// Config configures a Migrator. The zero value migrates the outbox schema
// for the default table "outbox" on the connection's search_path.
type Config struct {
	// Set is the series to apply. Default: Outbox.
	Set Set
	// Table names the tables to create; the set's base name is replaced by
	// Table.Name, and the tables are created in Table.Schema (which is
	// created if missing). Default: the set's own names, unqualified. The
	// schema may be any name txoutbox.Table allows but "$user", which a
	// search_path takes for the current role's schema. On MySQL a schema
	// is a database: Schema must be empty, and the tables are created in
	// the database the connection names.
	Table txoutbox.Table
	// Dialect is the database's. Default: detected from db's driver
	// (txoutbox.DetectDialect: the driver's type, or for a driver it does
	// not know, such as a tracing wrapper, one SELECT version()).
	Dialect txoutbox.Dialect
}

// Migrator applies and reverts a set of migrations and records the applied
// versions in the table <name>_schema_migrations. It is safe to run from
// several processes at once: every operation runs in one transaction under
// an advisory lock keyed by the table, and DDL in PostgreSQL is
// transactional, so a failed migration leaves nothing half applied.
//
// On MySQL and MariaDB every DDL statement commits on its own: operations
// are serialized by a named lock (GET_LOCK) keyed by the database and the
// table instead, and a migration that fails part way leaves the statements
// before the failure applied and its version unrecorded; the migrations
// are written so that Up applies them again over what is there.
type Migrator struct {
	db         *sql.DB
	set        Set
	migrations []migration
	schema     string // unquoted, may be empty
	table      string // unquoted base name of the tables
	tableName  string // quoted, qualified main table
	versions   string // quoted, qualified version table
	lockKey    string // PostgreSQL's advisory lock
	dialect    outboxsql.Dialect
	sql        versionSQL
}

// versionSQL is a dialect's statements on the version table: the steps of
// Up, Down and Status are the same on every dialect, and only these, the
// lock (Migrator.locked) and how a script runs (Migrator.execScript)
// differ.
type versionSQL struct {
	create string // create the table if missing
	read   string // version, name, applied_at of every applied version
	record string // record version $1 named $2 as applied now
	forget string // remove version $1's record
}

// postgresVersionSQL is versionSQL for PostgreSQL's version table versions
// (quoted, qualified).
func postgresVersionSQL(versions string) versionSQL {
	return versionSQL{
		create: "CREATE TABLE IF NOT EXISTS " + versions +
			" (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
		read:   "SELECT version, name, applied_at FROM " + versions,
		record: "INSERT INTO " + versions + " (version, name) VALUES ($1, $2)",
		forget: "DELETE FROM " + versions + " WHERE version = $1",
	}
}

// New validates cfg and returns a Migrator on db.
func New(db *sql.DB, cfg Config) (*Migrator, error) {
	if db == nil {
		return nil, errors.New("migrations: db is nil")
	}
	if cfg.Set == (Set{}) {
		cfg.Set = Outbox
	}
	if cfg.Table.Name == "" {
		cfg.Table.Name = cfg.Set.name
	}
	if err := cfg.Table.Validate(); err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	dialect := outboxsql.Dialect(cfg.Dialect)
	if !dialect.Valid() {
		return nil, fmt.Errorf("migrations: Config.Dialect: %w: %d", txoutbox.ErrInvalidDialect, uint8(cfg.Dialect))
	}
	if dialect == outboxsql.Unset {
		ctx, cancel := context.WithTimeout(context.Background(), detectTimeout)
		defer cancel()
		d, err := txoutbox.DetectDialect(ctx, db)
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		dialect = outboxsql.Dialect(d)
	}
	if dialect == outboxsql.MySQL {
		names, err := outboxsql.MySQLNamesFor(cfg.Table.Schema, cfg.Table.Name)
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		migs, err := cfg.Set.loadFor(dialect)
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		return &Migrator{db: db, set: cfg.Set, migrations: migs, table: cfg.Table.Name,
			tableName: names.Table, versions: names.Versions, dialect: dialect, sql: mysqlVersionSQL(names)}, nil
	}
	if cfg.Table.Schema == searchPathUser {
		// The migrations run with the schema as the search_path, where
		// PostgreSQL reads "$user", quoted or not, as the current role's
		// schema: they would land there, or fail.
		return nil, fmt.Errorf("migrations: %w: schema: %q in a search_path means the current role's schema, so migrations cannot be run into a schema of that name; run them by hand, naming each table",
			txoutbox.ErrInvalidTable, cfg.Table.Schema)
	}
	migs, err := cfg.Set.load()
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	versions := ident.Qualified(cfg.Table.Schema, cfg.Table.Name+"_schema_migrations")
	return &Migrator{
		db:         db,
		set:        cfg.Set,
		migrations: migs,
		schema:     cfg.Table.Schema,
		table:      cfg.Table.Name,
		tableName:  ident.Qualified(cfg.Table.Schema, cfg.Table.Name),
		versions:   versions,
		lockKey:    "txoutbox.migrate." + cfg.Table.Schema + "." + cfg.Table.Name,
		dialect:    outboxsql.PostgreSQL,
		sql:        postgresVersionSQL(versions),
	}, nil
}

// detectTimeout bounds New's probe of a driver DetectDialect does not know.
const detectTimeout = 10 * time.Second

// searchPathUser is the search_path entry that names the current role's
// schema.
const searchPathUser = "$user"

// Status is the state of one migration version.
type Status struct {
	Version   int        `json:"version"`
	Name      string     `json:"name"`
	AppliedAt *time.Time `json:"applied_at,omitempty"` // nil: not applied
	// Unknown: the version is applied but the set does not have it (a
	// newer txoutbox applied it; Name is the one it recorded). Up, Down
	// and Check refuse the table while it has one (ErrSchemaTooNew).
	Unknown bool `json:"unknown,omitempty"`
}

// Up applies every migration not yet applied, in version order, and returns
// the versions it applied (none when the schema is current). It applies
// none to a table that has a version the set does not have
// (ErrSchemaTooNew).
func (m *Migrator) Up(ctx context.Context) ([]int, error) {
	var applied []int
	err := m.locked(ctx, func(q querier, current map[int]appliedVersion) error {
		if err := m.refuseUnknown(current); err != nil {
			return err
		}
		for _, mig := range m.migrations {
			if _, ok := current[mig.Version]; ok {
				continue
			}
			if err := m.execScript(ctx, q, mig.up); err != nil {
				return fmt.Errorf("apply %04d_%s: %w", mig.Version, mig.Name, err)
			}
			if _, err := q.ExecContext(ctx, m.sql.record, mig.Version, mig.Name); err != nil {
				return fmt.Errorf("record %04d_%s: %w", mig.Version, mig.Name, err)
			}
			applied = append(applied, mig.Version)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrations: up: %w", err)
	}
	return applied, nil
}

// Down reverts the latest applied migration and returns its version, or 0
// when none is applied. It reverts none while the table has a version the
// set does not have (ErrSchemaTooNew): that version's own release must
// revert it first, or it would be left applied over what it built on.
func (m *Migrator) Down(ctx context.Context) (int, error) {
	reverted := 0
	err := m.locked(ctx, func(q querier, current map[int]appliedVersion) error {
		if err := m.refuseUnknown(current); err != nil {
			return err
		}
		for i := len(m.migrations) - 1; i >= 0; i-- {
			mig := m.migrations[i]
			if _, ok := current[mig.Version]; !ok {
				continue
			}
			if err := m.execScript(ctx, q, mig.down); err != nil {
				return fmt.Errorf("revert %04d_%s: %w", mig.Version, mig.Name, err)
			}
			if _, err := q.ExecContext(ctx, m.sql.forget, mig.Version); err != nil {
				return fmt.Errorf("unrecord %04d_%s: %w", mig.Version, mig.Name, err)
			}
			reverted = mig.Version
			return nil
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("migrations: down: %w", err)
	}
	return reverted, nil
}

// Status lists every migration of the set with when it was applied, and
// every version applied that the set does not have (Unknown), in version
// order.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	var out []Status
	err := m.locked(ctx, func(_ querier, current map[int]appliedVersion) error {
		for _, mig := range m.migrations {
			s := Status{Version: mig.Version, Name: mig.Name}
			if a, ok := current[mig.Version]; ok {
				s.AppliedAt = &a.at
			}
			out = append(out, s)
		}
		for v, a := range current {
			if !m.knows(v) {
				out = append(out, Status{Version: v, Name: a.name, AppliedAt: &a.at, Unknown: true})
			}
		}
		slices.SortFunc(out, func(a, b Status) int { return cmp.Compare(a.Version, b.Version) })
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrations: status: %w", err)
	}
	return out, nil
}

// querier is the one connection a locked run's statements go through: the
// transaction on PostgreSQL, the session holding the lock on MySQL.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// locked runs fn under the set's lock with the version table in place and
// the applied versions read: in a transaction on PostgreSQL (committed if
// fn succeeds), on a connection of its own on MySQL.
func (m *Migrator) locked(ctx context.Context, fn func(querier, map[int]appliedVersion) error) error {
	lock := m.inLockedTx
	if m.dialect == outboxsql.MySQL {
		lock = m.inMySQLLock
	}
	return lock(ctx, func(q querier) error {
		if _, err := q.ExecContext(ctx, m.sql.create); err != nil {
			return fmt.Errorf("create version table: %w", err)
		}
		current, err := m.applied(ctx, q)
		if err != nil {
			return err
		}
		return fn(q, current)
	})
}

// execScript runs a migration's script, its tables renamed for m, on q:
// whole on PostgreSQL, statement by statement on MySQL, whose drivers take
// one per call unless the DSN has multiStatements=true.
func (m *Migrator) execScript(ctx context.Context, q querier, script string) error {
	stmts := []string{m.rename(script)}
	if m.dialect == outboxsql.MySQL {
		stmts = outboxsql.SplitStatements(stmts[0])
	}
	for _, stmt := range stmts {
		if _, err := q.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// inLockedTx runs fn in a transaction holding the set's advisory lock, with
// the search_path set to the configured schema (created if missing), and
// commits if fn succeeds.
func (m *Migrator) inLockedTx(ctx context.Context, fn func(querier) error) (err error) {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", m.lockKey); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	if m.schema != "" {
		q := ident.Quote(m.schema)
		if _, err := tx.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+q); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
		if _, err := tx.ExecContext(ctx, "SET LOCAL search_path TO "+q); err != nil {
			return fmt.Errorf("set search_path: %w", err)
		}
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// appliedVersion is one version recorded in the version table.
type appliedVersion struct {
	name string
	at   time.Time
}

// applied reads the version table through q (the locked run's connection,
// or the pool for Check).
func (m *Migrator) applied(ctx context.Context, q querier) (map[int]appliedVersion, error) {
	rows, err := q.QueryContext(ctx, m.sql.read)
	if err != nil {
		return nil, fmt.Errorf("read applied versions: %w", err)
	}
	defer rows.Close()
	out := map[int]appliedVersion{}
	for rows.Next() {
		var v int
		var a appliedVersion
		// PostgreSQL's drivers return a time.Time, as MySQL's do with
		// parseTime=true; without it MySQL's return text.
		var at outboxsql.MySQLTime
		if err := rows.Scan(&v, &a.name, &at); err != nil {
			return nil, fmt.Errorf("read applied versions: %w", err)
		}
		a.at = at.Time
		out[v] = a
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read applied versions: %w", err)
	}
	return out, nil
}
