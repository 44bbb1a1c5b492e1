package outboxsql

// InboxClaim records that a consumer processed an event: $1 consumer, $2
// event id. It affects one row on the first delivery and none on a
// redelivery. A concurrent insert of the same key waits for the first
// transaction and then conflicts (it committed) or inserts (it rolled back),
// so exactly one transaction wins. Render with the inbox table as {{table}}.
const InboxClaim = `INSERT INTO {{table}} (consumer, event_id) VALUES ($1, $2::uuid) ON CONFLICT (consumer, event_id) DO NOTHING`

// InboxPrune deletes up to $2 rows processed more than $1 seconds ago,
// served by the processed_at index. Keys come from a LIMITed subquery
// because DELETE has no LIMIT; rows are never updated, so the key is stable.
const InboxPrune = `DELETE FROM {{table}} WHERE (consumer, event_id) IN (
	SELECT consumer, event_id FROM {{table}}
	WHERE processed_at < now() - $1::float8 * interval '1 second'
	LIMIT $2)`
