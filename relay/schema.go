package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox/migrations"
	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// schemaErr reports whether err is the schema check's refusal: a table
// older than the relay needs or with versions it does not know, or (on
// MySQL) a table or server the relay cannot run on (ErrInvalidConfig).
func schemaErr(err error) bool {
	return errors.Is(err, migrations.ErrSchemaTooOld) || errors.Is(err, migrations.ErrSchemaTooNew) ||
		errors.Is(err, ErrInvalidConfig)
}

// checkSchema checks the table's schema version once, under
// StatementTimeout (tableDB.checkSchema).
func (r *Relay) checkSchema(ctx context.Context) error {
	err := r.tables.checkSchema(ctx)
	if err != nil && !errors.Is(err, ErrInvalidConfig) { // that one already says "relay:"
		return fmt.Errorf("relay: %w", err)
	}
	return err
}

// awaitSchema checks the table's schema before Run does anything else: it
// returns the check's refusal, or nil once the schema passes; while the
// database does not answer it tries again, backing off as the relay does
// in an outage, and returns nil, with ok false, when ctx ends meanwhile.
func (r *Relay) awaitSchema(ctx context.Context) (ok bool, err error) {
	for attempt := 1; ; attempt++ {
		err := r.checkSchema(ctx)
		switch {
		case err == nil:
			return true, nil
		case schemaErr(err):
			return false, err
		case ctx.Err() != nil:
			return false, nil
		}
		if attempt == 1 {
			r.log.Warn("relay: could not read the outbox schema's version at start; trying again before starting", "err", err)
		}
		if !publish.Sleep(ctx, backoff(attempt, 100*time.Millisecond, r.cfg.OutageBackoffMax)) {
			return false, nil
		}
	}
}
