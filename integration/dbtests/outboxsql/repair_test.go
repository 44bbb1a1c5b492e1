package outboxsql_test

import (
	"testing"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// The repair of the rows no relay writes reads what a claim reads, its
// window of first attempts and of due retries, and repairs those of them
// in backoff by next_attempt_at alone: not the backlog behind them, the
// rows in backoff or the dead letters, however many.
func TestRepairCostIsItsWindowWithAnyBacklog(t *testing.T) {
	measure := func(backlog int) map[string]testkit.Work {
		c := newCostDB(t)
		// Ten of each kind no relay writes: a first attempt in backoff
		// (retry_at at its default), and a retry due by retry_at but in
		// backoff by next_attempt_at.
		c.insert(t, 10, `'foreign-' || g`, "pending", "3", "now() + interval '1 hour'", "now()", "NULL")
		c.exec(t, `INSERT INTO {{table}} (event_id, topic, aggregate_id, event_type, payload, attempts, next_attempt_at, retry_at)
            SELECT gen_random_uuid(), 'orders', 'refailed-' || g, 'e', '\x7b7d', 3, now() + interval '1 hour', now() - interval '1 hour'
            FROM generate_series(1, 10) g`)
		c.insert(t, backlog, `'agg-' || g`, "pending", "0", "now()", "now()", "NULL")
		c.exec(t, `INSERT INTO {{table}} (event_id, topic, aggregate_id, event_type, payload, attempts, next_attempt_at, retry_at)
            SELECT gen_random_uuid(), 'orders', 'retry-' || g, 'e', '\x7b7d', 1, t, t
            FROM generate_series(1, $1) g, LATERAL (SELECT now() + (g % 2 * 2 - 1) * interval '1 minute' AS t) x`, backlog)
		c.insert(t, backlog, `'dead-' || g`, "dead", "10", "now()", "now()", "NULL")
		c.settle(t)
		w := c.work(t, []string{settings(outboxsql.WalkSettings)}, outboxsql.RepairRetryAt,
			outboxsql.RepairArgs{Window: 500, Shards: allShards()}.Args()...)
		for mode, work := range w {
			if work.Rows != 20 {
				t.Fatalf("%s: repaired %d rows, want the 20 no relay writes", mode, work.Rows)
			}
		}
		return w
	}
	testkit.AssertFlat(t, "repair", costRatio, measure(costSmall), measure(costLarge))
}
