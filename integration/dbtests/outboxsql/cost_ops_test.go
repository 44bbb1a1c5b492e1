package outboxsql_test

import (
	"fmt"
	"testing"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// The operators' statements and the stats, at two sizes 10x apart, under
// both plans (see cost_test.go): each reads its page, its filter's index
// range or a capped count, not the dead letters or the backlog.

// deadTargets is how many dead rows the dead-letter tests look for among
// the others: topic 'poison', type 'boom', aggregate 'agg-poison', created
// within the last hour.
const deadTargets = 30

// insertTopics adds n rows as costDB.insert does, of topic topic-(g % 40)
// and type type-(g % 7).
func insertTopics(t *testing.T, c costDB, n int, aggregate, state, createdAt string) {
	t.Helper()
	c.exec(t, `INSERT INTO {{table}} (event_id, topic, aggregate_id, event_type, payload, state, attempts, created_at)
    SELECT gen_random_uuid(), 'topic-' || (g % 40), `+aggregate+`, 'type-' || (g % 7), '\x7b7d', '`+state+`', 0, `+createdAt+`
    FROM generate_series(1, $1) g`, n)
}

// deadLetters fills c with n dead rows of other topics, types and
// aggregates, created 20 days ago, and the targets among them (ids in the
// middle).
func deadLetters(t *testing.T, c costDB, n int) {
	t.Helper()
	insertTopics(t, c, n/2, `'dead-' || g`, "dead", "now() - interval '20 days'")
	c.exec(t, `INSERT INTO {{table}} (event_id, topic, aggregate_id, event_type, payload, state, attempts, created_at)
    SELECT gen_random_uuid(), 'poison', 'agg-poison', 'boom', '\x7b7d', 'dead', 10, now() - interval '30 minutes'
    FROM generate_series(1, $1)`, deadTargets)
	insertTopics(t, c, n-n/2, `'dead-' || g`, "dead", "now() - interval '20 days'")
	c.settle(t)
}

// A dead-letter page, count or lock with any of the filters reads the
// filter's index range, however many dead letters are kept.
func TestDeadLetterSelectionsCostTheirFilterWithAnyNumberOfDeadRows(t *testing.T) {
	// The filter sets (deadFilter's $1..$6) and the rows each selects.
	since, until := "now() - interval '1 hour'", "now()"
	cases := []struct {
		name string
		set  outboxsql.DeadFilters
		args []any // $1..$6
		rows int64 // the page's, at most deadTargets
	}{
		{"all", 0, []any{nil, nil, nil, nil, nil, nil}, 20},
		{"topic", outboxsql.DeadTopic, []any{nil, "poison", nil, nil, nil, nil}, 20},
		{"aggregate", outboxsql.DeadAggregate, []any{nil, nil, "agg-poison", nil, nil, nil}, 20},
		{"type", outboxsql.DeadType, []any{nil, nil, nil, "boom", nil, nil}, 20},
		{"type and topic", outboxsql.DeadType | outboxsql.DeadTopic, []any{nil, "poison", nil, "boom", nil, nil}, 20},
		{"since", outboxsql.DeadSince, []any{nil, nil, nil, nil, since, nil}, 20},
		{"until and topic", outboxsql.DeadTopic | outboxsql.DeadUntil, []any{nil, "poison", nil, nil, nil, until}, 20},
		{"window", outboxsql.DeadSince | outboxsql.DeadUntil, []any{nil, nil, nil, nil, since, until}, 20},
		{"window, topic, type, aggregate", outboxsql.DeadSince | outboxsql.DeadUntil | outboxsql.DeadTopic | outboxsql.DeadType | outboxsql.DeadAggregate,
			[]any{nil, "poison", "agg-poison", "boom", since, until}, 20},
	}
	type works struct{ list, count, lock map[string]testkit.Work }
	measure := func(dead int) map[string]works {
		c := newCostDB(t)
		deadLetters(t, c, dead)
		out := map[string]works{}
		for _, tc := range cases {
			args := make([]any, len(tc.args))
			copy(args, tc.args)
			for i, a := range args {
				// Times as SQL expressions: PlanWork takes literals, so
				// read them from the database clock first.
				if s, ok := a.(string); ok && (s == since || s == until) {
					var v string
					if err := c.db.QueryRow(`SELECT (` + s + `)::text`).Scan(&v); err != nil {
						t.Fatal(err)
					}
					args[i] = v
				}
			}
			var w works
			w.list = c.work(t, nil, outboxsql.OpsDeadList(tc.set), append(args, 0, 20)...)
			w.count = c.work(t, nil, outboxsql.OpsDeadCount(tc.set), append(args, 1000)...)
			w.lock = c.work(t, nil, outboxsql.OpsDeadLock(tc.set), args...)
			for mode, x := range w.list {
				if x.Rows != tc.rows {
					t.Fatalf("%s: dead list, %s: %d rows, want %d", tc.name, mode, x.Rows, tc.rows)
				}
			}
			if tc.set != 0 {
				for mode, x := range w.lock {
					if x.Rows != deadTargets {
						t.Fatalf("%s: dead lock, %s: %d rows, want the %d targets", tc.name, mode, x.Rows, deadTargets)
					}
				}
				var n int64
				q := c.names.Render(outboxsql.OpsDeadCount(tc.set))
				if err := c.db.QueryRow(q, append(args, 1000)...).Scan(&n); err != nil || n != deadTargets {
					t.Fatalf("%s: dead count = %d, %v; want %d", tc.name, n, err, deadTargets)
				}
			}
			out[tc.name] = w
		}
		return out
	}
	small, large := measure(costSmall), measure(10*costSmall)
	for _, tc := range cases {
		s, l := small[tc.name], large[tc.name]
		testkit.AssertFlat(t, tc.name+": dead list page", costRatio, s.list, l.list)
		testkit.AssertFlat(t, tc.name+": dead count up to 1000", costRatio, s.count, l.count)
		if tc.set != 0 { // all of them: the whole selection
			testkit.AssertFlat(t, tc.name+": dead lock", costRatio, s.lock, l.lock)
		}
	}
}

// An event id look-up reads the event's rows, not the backlog or the dead
// letters.
func TestEventIDLookupCostsTheEventWithAnyBacklog(t *testing.T) {
	measure := func(n int) map[string]map[string]testkit.Work {
		c := newCostDB(t)
		c.insert(t, n, `'dead-' || g`, "dead", "10", "now()", "now()", "NULL")
		c.insert(t, n, `'agg-' || g`, "pending", "0", "now()", "now()", "NULL")
		c.insert(t, 500, `'new-' || g`, "published", "0", "now()", "now()", "now()")
		c.settle(t)
		out := map[string]map[string]testkit.Work{}
		for _, state := range []string{"pending", "dead", "published"} {
			var id string
			q := c.names.Render(`SELECT event_id::text FROM {{table}} WHERE state = $1 ORDER BY id LIMIT 1 OFFSET 7`)
			if err := c.db.QueryRow(q, state).Scan(&id); err != nil {
				t.Fatal(err)
			}
			w := c.work(t, nil, outboxsql.OpsLookupEventID, id, 1000, 50)
			for mode, x := range w {
				if x.Rows != 1 {
					t.Fatalf("look-up of a %s event, %s: %d rows, want 1", state, mode, x.Rows)
				}
			}
			out[state] = w
		}
		return out
	}
	small, large := measure(costSmall), measure(costLarge)
	for _, state := range []string{"pending", "dead", "published"} {
		testkit.AssertFlat(t, "event id look-up of a "+state+" event", costRatio, small[state], large[state])
	}
}

// statsCap and topicCap are the caps the stats tests count to, in total
// and per topic: below both sizes, so the counts stop at the cap at both.
const (
	statsCap = 500
	topicCap = 50
)

// The stats count up to their cap and estimate the rest, at a cost that
// does not grow with the backlog or the dead letters.
func TestStatsCostTheirCapWithAnyBacklog(t *testing.T) {
	stmts := map[string]string{
		"stats": outboxsql.Stats, "backlog": outboxsql.StatsBacklog, "dead": outboxsql.StatsDead,
		"snapshot": outboxsql.OpsSnapshot, "topics": outboxsql.TopicStats,
	}
	measure := func(n int) map[string]map[string]testkit.Work {
		c := newCostDB(t)
		c.insert(t, n, `'old-' || g`, "published", "0", "now()", "now() - interval '2 days'", "now() - interval '2 days'")
		insertTopics(t, c, n, `'dead-' || g`, "dead", "now() - interval '1 day'")
		insertTopics(t, c, n, `'agg-' || g`, "pending", "now() - interval '1 second' * (g % 97)")
		c.settle(t)
		var backlog, dead int64
		q := c.names.Render(`SELECT ` + outboxsql.BacklogCount + `, ` + outboxsql.DeadCount)
		if err := c.db.QueryRow(q, statsCap).Scan(&backlog, &dead); err != nil {
			t.Fatal(err)
		}
		// The backlog is one id range: the estimate is exact. The dead
		// count is the statistics of the last VACUUM: within a few
		// percent.
		if backlog != int64(n) || dead < statsCap || float64(dead) < 0.9*float64(n) || float64(dead) > 1.1*float64(n) {
			t.Fatalf("estimates of %d unpublished and %d dead rows: %d and %d", n, n, backlog, dead)
		}
		// Below the cap, exact.
		if err := c.db.QueryRow(q, 10*n).Scan(&backlog, &dead); err != nil || backlog != int64(n) || dead != int64(n) {
			t.Fatalf("counts of %d unpublished and %d dead rows under the cap: %d and %d, %v", n, n, backlog, dead, err)
		}
		// One transaction: now() is its start in both statements, so the
		// lags compare exactly however slow the machine.
		tx, err := c.db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		rows, err := tx.Query(c.names.Render(outboxsql.TopicStats), topicCap)
		if err != nil {
			t.Fatal(err)
		}
		type topicRow struct {
			topic    string
			b, d, sc int64
			lag      float64
		}
		var got []topicRow
		for rows.Next() {
			var r topicRow
			if err := rows.Scan(&r.topic, &r.b, &r.lag, &r.d, &r.sc); err != nil {
				t.Fatal(err)
			}
			got = append(got, r)
		}
		if err := rows.Err(); err != nil || len(got) != 40 {
			t.Fatalf("topics = %v, %v; want the 40", got, err)
		}
		rows.Close()
		for _, r := range got {
			var want float64
			q := c.names.Render(`SELECT extract(epoch FROM now() - min(created_at))::float8 FROM {{table}} WHERE state = 'pending' AND topic = $1`)
			if err := tx.QueryRow(q, r.topic).Scan(&want); err != nil {
				t.Fatal(err)
			}
			if r.b != topicCap || r.d != topicCap || r.lag < want-1 || r.lag > want+1 {
				t.Fatalf("topic %s: backlog %d, dead %d, lag %fs; want %d and %d (the cap), and %fs", r.topic, r.b, r.d, r.lag, topicCap, topicCap, want)
			}
		}
		_ = tx.Rollback()
		out := map[string]map[string]testkit.Work{}
		for name, stmt := range stmts {
			limit := statsCap
			if name == "topics" {
				limit = topicCap
			}
			out[name] = c.work(t, nil, stmt, limit)
		}
		return out
	}
	small, large := measure(costSmall+500), measure(10*(costSmall+500)) // a topic holds the cap at both
	for name := range stmts {
		testkit.AssertFlat(t, name, costRatio, small[name], large[name])
	}
}

// The console's and outbox status's handover check reads its window of
// the backlog, not all of it.
func TestOpsHandoversCostTheirWindowWithAnyBacklog(t *testing.T) {
	measure := func(backlog int) map[string]testkit.Work {
		c := newCostDB(t)
		c.exec(t, `INSERT INTO {{relays}} (id, name) VALUES ('me', 'me'), ('peer', 'peer')`)
		c.exec(t, `UPDATE {{shards}} SET owner = 'me'`)
		c.insert(t, backlog, `'agg-' || g`, "pending", "0", "now()", "now()", "NULL")
		c.exec(t, `UPDATE {{table}} SET lease_owner = 'peer', lease_expires_at = now() + interval '1 hour',
            next_attempt_at = now() + interval '1 hour' WHERE id <= 20`)
		c.settle(t)
		want := c.shards(t, `SELECT DISTINCT shard FROM {{table}} WHERE id <= 20`)
		if got := c.shards(t, outboxsql.OpsHandovers, 500); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("shards in handover = %v, want %v (those of the peer's rows)", got, want)
		}
		return c.work(t, nil, outboxsql.OpsHandovers, 500)
	}
	testkit.AssertFlat(t, "ops handovers", costRatio, measure(10*costSmall), measure(10*costLarge))
}

// Every form of the dead-letter selections selects the rows its filters
// say, in id order, and pages after $7.
func TestDeadLetterFormsSelectWhatTheirFiltersSay(t *testing.T) {
	c := newCostDB(t)
	// Two of each value, every combination, dead and not.
	c.exec(t, `INSERT INTO {{table}} (event_id, topic, aggregate_id, event_type, payload, state, attempts, created_at)
    SELECT gen_random_uuid(), 't' || (g % 2), 'a' || (g / 2 % 2), 'y' || (g / 4 % 2), '\x7b7d',
           CASE WHEN g % 5 = 0 THEN 'pending' ELSE 'dead' END, 10, now() - interval '1 hour' * (g / 8 % 3)
    FROM generate_series(1, 96) g`)
	var ids, since, until string
	if err := c.db.QueryRow(c.names.Render(`SELECT '{' || (SELECT string_agg(id::text, ',') FROM {{table}} WHERE id % 3 = 0) || '}',
        (now() - interval '90 minutes')::text, (now() - interval '30 minutes')::text`)).Scan(&ids, &since, &until); err != nil {
		t.Fatal(err)
	}
	values := []any{ids, "t1", "a0", "y1", since, until}
	conds := []string{"id = ANY($1::bigint[])", "topic = $2", "aggregate_id = $3", "event_type = $4", "created_at >= $5::timestamptz", "created_at < $6::timestamptz"}
	query := func(q string, args ...any) []int64 {
		t.Helper()
		return column[int64](t, c, q, args...)
	}
	for f := outboxsql.DeadFilters(0); f < outboxsql.DeadForms; f++ {
		args := make([]any, 6)
		ref := `SELECT id FROM {{table}} WHERE state = 'dead'`
		for i := range args {
			if f&(1<<i) != 0 {
				args[i] = values[i]
				ref += " AND " + conds[i]
			} else {
				ref += fmt.Sprintf(" AND $%d::text IS NULL", i+1)
			}
		}
		want := query(ref+" ORDER BY id", args...)
		if f == 0 && len(want) == 0 {
			t.Fatal("no dead rows")
		}
		locked := query(`SELECT id FROM (`+outboxsql.OpsDeadLock(f)+`) s`, args...)
		if fmt.Sprint(locked) != fmt.Sprint(want) {
			t.Fatalf("filters %06b: locked %v, want %v", f, locked, want)
		}
		var n int
		if err := c.db.QueryRow(c.names.Render(outboxsql.OpsDeadCount(f)), append(args, 1000)...).Scan(&n); err != nil || n != len(want) {
			t.Fatalf("filters %06b: count = %d, %v; want %d", f, n, err, len(want))
		}
		// Two rows a page, from the start, then after the first page.
		if len(want) < 3 {
			continue
		}
		page := query(`SELECT id FROM (`+outboxsql.OpsDeadList(f)+`) s`, append(args, 0, 2)...)
		next := query(`SELECT id FROM (`+outboxsql.OpsDeadList(f)+`) s`, append(args, want[1], 2)...)
		if fmt.Sprint(page) != fmt.Sprint(want[:2]) || next[0] != want[2] {
			t.Fatalf("filters %06b: pages %v then %v, want %v", f, page, next, want)
		}
	}
}

// Beyond the cap, the backlog's estimate scales the rest of its id range
// by the density of the rows counted: a shard held back while the others
// publish is estimated as it is, not as the whole range.
func TestBacklogEstimateFollowsTheDensityOfTheBacklog(t *testing.T) {
	c := newCostDB(t)
	c.exec(t, `INSERT INTO {{table}} (event_id, topic, aggregate_id, event_type, payload, state, published_at)
    SELECT gen_random_uuid(), 'orders', 'a-' || g, 'e', '\x7b7d',
           CASE WHEN g % 4 = 0 THEN 'pending' ELSE 'published' END, CASE WHEN g % 4 = 0 THEN NULL ELSE now() END
    FROM generate_series(1, 40000) g`)
	var n int64
	if err := c.db.QueryRow(c.names.Render(`SELECT `+outboxsql.BacklogCount), statsCap).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n < 9_900 || n > 10_100 {
		t.Fatalf("backlog estimate of 10,000 rows, one in four ids = %d", n)
	}
}

// Retry, drop and replay change the rows they were given, by id, not the
// dead letters or the published rows around them.
func TestRetryDropReplayCostTheirRows(t *testing.T) {
	stmts := map[string]string{"retry": outboxsql.OpsRetry, "drop": outboxsql.OpsDrop, "replay": outboxsql.OpsReplay}
	measure := func(n int) map[string]map[string]testkit.Work {
		c := newCostDB(t)
		c.insert(t, n, `'dead-' || g`, "dead", "10", "now()", "now()", "NULL")
		c.insert(t, n, `'old-' || g`, "published", "0", "now()", "now()", "now()")
		c.settle(t)
		ids := map[string]string{}
		for name, state := range map[string]string{"retry": "dead", "drop": "dead", "replay": "published"} {
			var v string
			q := c.names.Render(`SELECT '{' || string_agg(id::text, ',') || '}' FROM (SELECT id FROM {{table}} WHERE state = $1 ORDER BY id OFFSET 100 LIMIT 5) s`)
			if err := c.db.QueryRow(q, state).Scan(&v); err != nil {
				t.Fatal(err)
			}
			ids[name] = v
		}
		out := map[string]map[string]testkit.Work{}
		for name, stmt := range stmts {
			out[name] = c.work(t, nil, stmt, ids[name])
		}
		return out
	}
	small, large := measure(costSmall), measure(costLarge)
	for name := range stmts {
		testkit.AssertFlat(t, name+" of 5 rows", costRatio, small[name], large[name])
	}
}
