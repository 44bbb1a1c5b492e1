package outboxsql

// The statement of the test helpers (packages outboxtest and
// relay/relaytest). It reads a test's outbox whole: no production code
// runs it, so its cost is a test table's size.

// TestEvents reads every row of the outbox, in the order written (id).
const TestEvents = `SELECT id, event_id::text, topic, aggregate_type, aggregate_id, event_type, content_type,
       payload, headers::text, created_at, state, attempts, coalesce(last_error, '')
FROM {{table}} ORDER BY id`
