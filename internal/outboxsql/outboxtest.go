package outboxsql

// The statements of the test helpers (packages outboxtest and
// relay/relaytest). They read a test's outbox whole: no production code
// runs them, so their cost is a test table's size.

// TestEvents reads every row of the outbox, in the order written (id).
const TestEvents = `SELECT id, event_id::text, topic, aggregate_type, aggregate_id, event_type, content_type,
       payload, headers::text, created_at, not_before, state, attempts, coalesce(last_error, '')
FROM {{table}} ORDER BY id`
