package relay

import "context"

// CheckGrants returns an error naming the first privilege the relay's
// database role lacks on the outbox tables, with the GRANT that gives it,
// or nil. Run calls nothing of the kind: call it before Run to fail at
// start-up rather than with "permission denied" in a loop. A relay needs
// SELECT, UPDATE and DELETE on the outbox table, SELECT, INSERT, UPDATE and
// DELETE on its relays table, SELECT and UPDATE on its shards and claim
// floor tables, SELECT on the version table (<table>_schema_migrations,
// which Run reads at start, when it exists), and USAGE on their schema.
// On MySQL and MariaDB it needs the same privileges on the tables, and
// names every one missing; it reads them from information_schema, which
// shows no role's grants, so with a role enabled in the session it
// refuses nothing (see docs/mysql.md).
func (r *Relay) CheckGrants(ctx context.Context) error {
	return r.tables.checkGrants(ctx)
}
