package relay

import "context"

// CheckGrants returns an error naming every privilege the relay's
// database user lacks on the outbox tables, with the GRANTs that give
// them, or nil. Run calls nothing of the kind: call it before Run to fail
// at start-up rather than with "permission denied" in a loop. A relay needs
// SELECT, UPDATE and DELETE on the outbox table, SELECT, INSERT, UPDATE and
// DELETE on its relays table, SELECT and UPDATE on its shards and claim
// floor tables, SELECT on the version table (<table>_schema_migrations,
// which Run reads at start, when it exists), and on PostgreSQL USAGE on
// their schema. On MySQL and MariaDB it reads them from
// information_schema, which shows an account no role's grants: with a
// role enabled in the session it refuses nothing (see docs/mysql.md).
func (r *Relay) CheckGrants(ctx context.Context) error {
	return r.tables.checkGrants(ctx)
}
