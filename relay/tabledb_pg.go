package relay

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox/internal/grants"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/migrations"
)

// schemaVersion is the outbox schema version a relay needs: the newest of
// its release, the schema it is tested with and the one its release's
// `outbox migrate up` leaves, whichever of them its own statements read.
var schemaVersion = migrations.Outbox.Latest()

// pgTableDB is the table as a whole on PostgreSQL: the lockout's probe
// (LockProbe and LockProbeGates), SQLSTATE 55P03 (lock_not_available) for
// a lock given up on, the schema check through migrations.Migrator, and
// the grants check of internal/grants.
type pgTableDB struct {
	db      *sql.DB
	sql     *statements
	schema  *migrations.Migrator // checks the table's schema version
	timeout time.Duration        // Config.StatementTimeout
}

var _ tableDB = (*pgTableDB)(nil)

func newPGTableDB(db *sql.DB, q *statements, schema *migrations.Migrator, cfg Config) *pgTableDB {
	return &pgTableDB{db: db, sql: q, schema: schema, timeout: cfg.StatementTimeout}
}

// probe runs outboxsql.LockProbe and LockProbeGates in a transaction it
// rolls back: nil when the relay's statements would find no lock in their
// way now.
func (p *pgTableDB) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a probe changes nothing
	if _, err := tx.ExecContext(ctx, p.sql.lockProbe); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	var free bool
	if err := tx.QueryRowContext(ctx, p.sql.lockProbeGates, p.sql.table).Scan(&free); err != nil {
		return fmt.Errorf("probe the gates: %w", err)
	}
	if !free {
		return errGateHeld
	}
	return nil
}

// lockWait reports whether err is the server's: a statement gave up on a
// lock (lock_timeout or NOWAIT), SQLSTATE 55P03.
func (p *pgTableDB) lockWait(err error) bool { return outboxsql.IsLockNotAvailable(err) }

// checkSchema checks the table's schema version once, under
// StatementTimeout: schemaVersion at least.
func (p *pgTableDB) checkSchema(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return p.schema.Check(ctx, schemaVersion)
}

func (p *pgTableDB) checkGrants(ctx context.Context) error {
	return grants.Check(ctx, p.db, "the relay", grants.Relay(p.sql.names))
}
