package outboxsql

// InboxClaim records that a consumer processed an event: $1 consumer, $2
// event id. It affects one row on the first delivery and none on a
// redelivery. A concurrent insert of the same key waits for the first
// transaction and then conflicts (it committed) or inserts (it rolled back),
// so exactly one transaction wins. Render with the inbox table as {{table}}.
const InboxClaim = `INSERT INTO {{table}} (consumer, event_id) VALUES ($1, $2::uuid) ON CONFLICT (consumer, event_id) DO NOTHING`

// InboxPrune deletes up to $2 of the oldest rows processed more than $1
// seconds ago. DELETE has no LIMIT, so the rows are picked by a LIMITed
// subquery on the processed_at index and deleted by ctid (a TID scan): a
// join back on the (consumer, event_id) key plans as a scan of the whole
// table per batch. Rows are never updated, so a row's ctid is stable, and a
// row deleted meanwhile by a concurrent Prune is skipped.
const InboxPrune = `DELETE FROM {{table}} WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM {{table}}
	WHERE processed_at < now() - $1::float8 * interval '1 second'
	ORDER BY processed_at
	LIMIT $2))`
