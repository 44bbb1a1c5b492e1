package walrelay

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/txoutbox/migrations"
)

// schemaVersion is the outbox schema version a WAL relay needs: the newest
// of its release, as the polling relay's.
var schemaVersion = migrations.Outbox.Latest()

// checkSchema checks the table's schema version through pool, under
// StatementTimeout: it fails, matching migrations.ErrSchemaTooOld or
// ErrSchemaTooNew, for a table the relay would misread.
func (r *Relay) checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	m, err := migrations.New(db, migrations.Config{Table: r.cfg.Table})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
	defer cancel()
	if err := m.Check(ctx, schemaVersion); err != nil {
		return fmt.Errorf("walrelay: %w", err)
	}
	return nil
}
