package outboxsql

// The statements of the test helpers (packages outboxtest and
// relay/relaytest). They read a test's outbox whole or its dead rows: no
// production code runs them, so their cost is a test table's size.

// TestEvents reads every row of the outbox, in the order written (id).
const TestEvents = `SELECT id, event_id::text, topic, aggregate_type, aggregate_id, event_type, content_type,
       payload, headers::text, created_at, state, attempts, coalesce(last_error, '')
FROM {{table}} ORDER BY id`

// TestDeadMax is the highest id of a dead row, 0 without one, through the
// dead-letter index.
const TestDeadMax = `SELECT coalesce(max(id), 0) FROM {{table}} WHERE state = 'dead'`

// TestDead reads the dead rows after id $1 in id order, through the
// dead-letter index.
const TestDead = `SELECT id, event_id::text, topic, event_type, aggregate_id, attempts, coalesce(last_error, '')
FROM {{table}} WHERE state = 'dead' AND id > $1 ORDER BY id`

// TestDeadArgs binds TestDead.
type TestDeadArgs struct {
	After int64 // $1: the rows after this id; 0 for all
}

// Args returns the parameters in order.
func (a TestDeadArgs) Args() []any { return []any{a.After} }
