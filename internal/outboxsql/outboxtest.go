package outboxsql

import "time"

// The statements of the test helpers (packages outboxtest and
// relay/relaytest). They read a test's outbox whole: no production code
// runs them, so their cost is a test table's size.

// TestEvents reads every row of the outbox, in the order written (id).
const TestEvents = `SELECT id, event_id::text, topic, aggregate_type, aggregate_id, event_type, content_type,
       payload, headers::text, created_at, not_before, state, attempts, coalesce(last_error, '')
FROM {{table}} ORDER BY id`

// TestDrainable reports whether unpublished rows are left, and whether
// one of them may still be published by $1 (TestDrainArgs): one that is
// neither scheduled for later than $1 (a not_before, and a retry time,
// past it: TestAdvance moves the retry time only) nor held behind an
// earlier unpublished row of its aggregate that is; and the database
// clock.
const TestDrainable = `SELECT EXISTS (SELECT 1 FROM {{table}} WHERE state IN ('pending', 'claimed')),
    EXISTS (SELECT 1 FROM {{table}} o
            WHERE o.state IN ('pending', 'claimed') AND NOT coalesce(o.not_before > $1 AND o.retry_at > $1, false)
              AND NOT EXISTS (SELECT 1 FROM {{table}} h
                              WHERE h.aggregate_id = o.aggregate_id AND h.id < o.id AND h.state IN ('pending', 'claimed')
                                AND h.not_before > $1 AND h.retry_at > $1)),
    now()`

// TestAdvance makes the unpublished rows scheduled no later than $1
// (TestDrainArgs) due now, as if their time had come: it moves the retry
// time the claim reads (and next_attempt_at), and leaves not_before as the
// application wrote it. A scheduled row is one the relay never tried, its
// retry time still its not_before.
const TestAdvance = `UPDATE {{table}} SET retry_at = now(), next_attempt_at = now()
WHERE state IN ('pending', 'claimed') AND not_before > now() AND not_before <= $1 AND retry_at = not_before`

// TestDrainArgs binds TestDrainable and TestAdvance.
type TestDrainArgs struct {
	Time time.Time // $1: Drain's deadline (TestDrainable), the test's clock (TestAdvance)
}

// Args returns the parameters in order.
func (a TestDrainArgs) Args() []any { return []any{a.Time} }
