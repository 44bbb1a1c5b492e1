package main

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// The plain loop: the least a relay has to do per event, on a table that
// holds nothing else. No leases, shards, retries or dead events, so not a
// relay anyone could ship, but what the essential work costs.
const (
	plainTableSQL = `
CREATE TABLE {{plain}} (
    id           bigserial PRIMARY KEY,
    aggregate_id text NOT NULL,
    payload      jsonb NOT NULL,
    status       text NOT NULL DEFAULT 'pending',
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz
);
CREATE INDEX plain_outbox_pending ON {{plain}} (id) WHERE status = 'pending'`

	// plainBacklogSQL writes the same events as insertBacklogSQL: $1
	// events over $2 aggregates, round-robin, ~200-byte payloads.
	plainBacklogSQL = `
INSERT INTO {{plain}} (aggregate_id, payload)
SELECT 'agg-' || lpad((g % $2)::text, 5, '0'),
       format('{"agg":"agg-%s","seq":%s,"pad":"%s"}', lpad((g % $2)::text, 5, '0'), g / $2, $3::text)::jsonb
FROM generate_series(0::bigint, $1::bigint - 1) AS g`

	// plainClaimSQL updates the locked rows by primary key, an array of
	// their ids computed once. Written as "id IN (SELECT ...)", the
	// planner hash-joins the subquery with a sequential scan of the whole
	// table, published rows and all, at the bench's sizes (in the generic
	// plan at 400,000 rows too), and the loop's claim cost up to twice
	// what it does here (TestPlainClaimCostIsItsBatch).
	plainClaimSQL = `
UPDATE {{plain}} SET status = 'claimed'
WHERE id = ANY(ARRAY(
    SELECT id FROM {{plain}} WHERE status = 'pending'
    ORDER BY id LIMIT $1
    FOR UPDATE SKIP LOCKED))
RETURNING id, aggregate_id, payload`

	plainMarkSQL = `UPDATE {{plain}} SET status = 'published', published_at = now() WHERE id = ANY($1)`
)

// The plain loop on MySQL: the same table, with an index led by status
// where PostgreSQL has a partial one; the claim is a locking read and an
// UPDATE of the ids it returned in one short READ COMMITTED transaction
// (claimLocked: MySQL has no UPDATE ... RETURNING), and the mark one UPDATE
// with a list of the ids (inList: no array parameters).
const (
	plainTableMySQL = `
CREATE TABLE {{plain}} (
    id           BIGINT       NOT NULL AUTO_INCREMENT,
    aggregate_id VARCHAR(255) NOT NULL,
    payload      JSON         NOT NULL,
    status       VARCHAR(9)   NOT NULL DEFAULT 'pending',
    created_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    published_at DATETIME(6)  NULL,
    PRIMARY KEY (id),
    KEY plain_outbox_pending (status, id)
) ENGINE = InnoDB`

	// plainInsertMySQL is the start of a multi-row insert of the
	// backlog's events, to which plainBacklogMySQL adds "(?, ?)" a row.
	plainInsertMySQL = `INSERT INTO {{plain}} (aggregate_id, payload) VALUES `

	plainClaimMySQL = `
SELECT id, aggregate_id, payload FROM {{plain}} WHERE status = 'pending'
ORDER BY id LIMIT ?
FOR UPDATE SKIP LOCKED`

	// plainClaimedMySQL and plainMarkMySQL end in "IN": inList adds the
	// ids.
	plainClaimedMySQL = `UPDATE {{plain}} SET status = 'claimed' WHERE id IN`
	plainMarkMySQL    = `UPDATE {{plain}} SET status = 'published', published_at = CURRENT_TIMESTAMP(6) WHERE id IN`
)

// The plain loop's batch and lanes are the relay's defaults.
const (
	plainBatch = 1000
	plainLanes = 64
)

type plainRow struct {
	id      int64
	agg     string
	payload []byte
}

// plainTable is the plain loop's table in a scenario's schema.
type plainTable struct {
	s    *schemaDB
	name string // quoted, schema-qualified on PostgreSQL
}

// newPlainTable creates the plain loop's table in s.
func newPlainTable(ctx context.Context, s *schemaDB) (plainTable, error) {
	t := plainTable{s: s, name: pgx.Identifier{s.Schema, "plain_outbox"}.Sanitize()}
	create := plainTableSQL
	if s.mysql {
		t.name, create = outboxsql.MySQLQuote("plain_outbox"), plainTableMySQL
	}
	if _, err := s.SQL.ExecContext(ctx, t.render(create)); err != nil {
		return t, fmt.Errorf("plain: create table: %w", err)
	}
	return t, nil
}

// render puts the table's name in q.
func (t plainTable) render(q string) string { return strings.ReplaceAll(q, "{{plain}}", t.name) }

// writeBacklog writes n events over aggregates, the same as insertBacklog
// writes to the outbox, and analyzes the table.
func (t plainTable) writeBacklog(ctx context.Context, n, aggregates int) error {
	if t.s.mysql {
		return t.writeBacklogMySQL(ctx, n, aggregates)
	}
	checkpoint(ctx, t.s.SQL)
	if _, err := t.s.SQL.ExecContext(ctx, t.render(plainBacklogSQL), n, aggregates, payloadPad); err != nil {
		return fmt.Errorf("plain: write backlog: %w", err)
	}
	if _, err := t.s.SQL.ExecContext(ctx, t.render("VACUUM ANALYZE {{plain}}")); err != nil {
		return fmt.Errorf("plain: analyze backlog: %w", err)
	}
	return nil
}

// writeBacklogMySQL writes the backlog in multi-row inserts of
// outboxsql.MySQLMaxRowsPerStatement events.
func (t plainTable) writeBacklogMySQL(ctx context.Context, n, aggregates int) error {
	const perStatement = outboxsql.MySQLMaxRowsPerStatement
	var (
		b    strings.Builder
		args = make([]any, 0, 2*min(n, perStatement))
	)
	for done := 0; done < n; done += perStatement {
		b.Reset()
		b.WriteString(t.render(plainInsertMySQL))
		args = args[:0]
		for i := done; i < min(done+perStatement, n); i++ {
			if i > done {
				b.WriteByte(',')
			}
			b.WriteString("(?, ?)")
			agg := aggregateID(i, aggregates)
			payload, err := json.Marshal(benchPayload{Agg: agg, Seq: i / aggregates, Pad: payloadPad})
			if err != nil {
				return err
			}
			args = append(args, agg, payload)
		}
		if _, err := t.s.SQL.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("plain: write backlog: %w", err)
		}
	}
	return analyzeMySQL(ctx, t.s.SQL, t.name)
}

// claim claims a batch of pending rows and returns them in id order.
func (t plainTable) claim(ctx context.Context) ([]plainRow, error) {
	scan := func(rows *sql.Rows) (plainRow, error) {
		var r plainRow
		err := rows.Scan(&r.id, &r.agg, &r.payload)
		return r, err
	}
	id := func(r plainRow) int64 { return r.id }
	var (
		out []plainRow
		err error
	)
	if t.s.mysql {
		out, err = claimLocked(ctx, t.s, t.render(plainClaimMySQL), t.render(plainClaimedMySQL), plainBatch, scan, id)
	} else {
		out, err = claimSorted(ctx, t.s, t.render(plainClaimSQL), plainBatch, scan, id)
	}
	if err != nil {
		return nil, fmt.Errorf("plain: %w", err)
	}
	return out, nil
}

// mark marks the rows of ids published, in one statement.
func (t plainTable) mark(ctx context.Context, ids []int64) error {
	var err error
	if t.s.mysql {
		q, args := inList(t.render(plainMarkMySQL), ids)
		_, err = t.s.SQL.ExecContext(ctx, q, args...)
	} else {
		_, err = t.s.SQL.ExecContext(ctx, t.render(plainMarkSQL), ids)
	}
	if err != nil {
		return fmt.Errorf("plain: mark: %w", err)
	}
	return nil
}

// runPlain drains the backlog with the plain loop: one worker claims 1,000
// ids in id order in a statement of its own (on MySQL, a transaction of
// two), publishes them on 64 lanes by hash of the aggregate id through one
// watermill-kafka publisher (the relay's), each lane synchronously, marks
// the acknowledged ids in one statement, and claims again.
func runPlain(ctx context.Context, e *env, round int) (throughput, error) {
	s, err := e.newSchema(ctx, "plain")
	if err != nil {
		return throughput{}, err
	}
	defer s.close()
	t, err := newPlainTable(ctx, s)
	if err != nil {
		return throughput{}, err
	}
	n := e.opts.events
	if err := t.writeBacklog(ctx, n, e.opts.aggregates); err != nil {
		return throughput{}, err
	}
	topic, err := e.topic(ctx, fmt.Sprintf("bench.plain.%d", round))
	if err != nil {
		return throughput{}, err
	}

	m := e.startMeter(ctx, s.SQL)
	start := time.Now()
	pub, err := e.loopPublisher()
	if err != nil {
		return throughput{}, err
	}
	done, err := plainLoop(ctx, t, pub, topic, start.Add(e.opts.timeout), 0)
	pub.Close()
	took := time.Since(start)
	c := m.stop(ctx, n)
	if err != nil || done != n {
		return throughput{}, &incompleteError{Published: int64(done), Backlog: int64(n), Elapsed: took, Err: err}
	}
	mark := "one UPDATE ... WHERE id = ANY($1) per batch"
	if s.mysql {
		mark = "one UPDATE ... WHERE id IN (...) per batch; the claim a SELECT ... FOR UPDATE SKIP LOCKED and an UPDATE of its ids in one READ COMMITTED transaction"
	}
	res := newThroughput("plain", n, took, e.producerSettings(map[string]any{"workers": 1, "batch": plainBatch, "lanes": plainLanes,
		"publisher": "kafkapub.Publisher.Publish (one message per call, as watermill-kafka's Publish)", "mark": mark}))
	res.Cost, res.Round = c, round
	return e.withDelivery(ctx, res, topic)
}

// plainLoop claims, publishes and marks until the deadline passes, ctx
// ends, or, with poll 0, a claim finds nothing; with poll, it waits that
// long after a claim that came back short of its batch and claims again.
// It returns how many events it published.
func plainLoop(ctx context.Context, t plainTable, pub message.Publisher, topic string, deadline time.Time, poll time.Duration) (int, error) {
	total := 0
	for ctx.Err() == nil && time.Now().Before(deadline) {
		rows, err := t.claim(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return total, err
		}
		if len(rows) == 0 && poll == 0 {
			break
		}
		acked, err := plainPublish(pub, topic, rows)
		if len(acked) > 0 {
			if merr := t.mark(ctx, acked); merr != nil {
				if ctx.Err() != nil {
					break
				}
				return total, merr
			}
			total += len(acked)
		}
		if err != nil {
			return total, err
		}
		if len(rows) < plainBatch && poll > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(poll):
			}
		}
	}
	return total, nil
}

// plainPublish publishes rows on plainLanes lanes by hash of the aggregate
// id, each lane one message at a time in id order, and returns the ids the
// broker acknowledged. A lane stops at its first error.
func plainPublish(pub message.Publisher, topic string, rows []plainRow) ([]int64, error) {
	var lanes [plainLanes][]plainRow
	for _, r := range rows {
		h := fnv.New32a()
		h.Write([]byte(r.agg))
		l := h.Sum32() % plainLanes
		lanes[l] = append(lanes[l], r)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		acked = make([]int64, 0, len(rows))
		first error
	)
	for _, lane := range lanes {
		if len(lane) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, r := range lane {
				msg := message.NewMessage(strconv.FormatInt(r.id, 10), r.payload)
				msg.Metadata.Set(txoutbox.HeaderAggregateID, r.agg) // kafkapub's message key
				if err := pub.Publish(topic, msg); err != nil {
					mu.Lock()
					first = cmp.Or(first, fmt.Errorf("plain: publish: %w", err))
					mu.Unlock()
					return
				}
				mu.Lock()
				acked = append(acked, r.id)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return acked, first
}
