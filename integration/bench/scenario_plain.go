package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/txoutbox"
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

	plainClaimSQL = `
UPDATE {{plain}} SET status = 'claimed'
WHERE id IN (
    SELECT id FROM {{plain}} WHERE status = 'pending'
    ORDER BY id LIMIT $1
    FOR UPDATE SKIP LOCKED)
RETURNING id, aggregate_id, payload`

	plainMarkSQL = `UPDATE {{plain}} SET status = 'published', published_at = now() WHERE id = ANY($1)`
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

// runPlain drains the backlog with the plain loop: one worker claims 1,000
// ids in id order in a statement of its own, publishes them on 64 lanes by
// hash of the aggregate id through one watermill-kafka publisher (the
// relay's), each lane synchronously, marks the acknowledged ids in one
// statement, and claims again.
func runPlain(ctx context.Context, e *env, round int) (throughput, error) {
	s, err := e.newSchema(ctx, "plain")
	if err != nil {
		return throughput{}, err
	}
	defer s.close()
	table := pgx.Identifier{s.Schema, "plain_outbox"}.Sanitize()
	render := func(q string) string { return strings.ReplaceAll(q, "{{plain}}", table) }
	if _, err := s.SQL.ExecContext(ctx, render(plainTableSQL)); err != nil {
		return throughput{}, fmt.Errorf("plain: create table: %w", err)
	}
	n := e.opts.events
	checkpoint(ctx, s.SQL)
	if _, err := s.SQL.ExecContext(ctx, render(plainBacklogSQL), n, e.opts.aggregates, payloadPad); err != nil {
		return throughput{}, fmt.Errorf("plain: write backlog: %w", err)
	}
	if _, err := s.SQL.ExecContext(ctx, render("VACUUM ANALYZE {{plain}}")); err != nil {
		return throughput{}, fmt.Errorf("plain: analyze backlog: %w", err)
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
	done, err := plainLoop(ctx, s, pub, render(plainClaimSQL), render(plainMarkSQL), topic, start.Add(e.opts.timeout), 0)
	pub.Close()
	took := time.Since(start)
	c := m.stop(ctx, n)
	if err != nil || done != n {
		return throughput{}, &incompleteError{Published: int64(done), Backlog: int64(n), Elapsed: took, Err: err}
	}
	res := newThroughput("plain", n, took, e.producerSettings(map[string]any{"workers": 1, "batch": plainBatch, "lanes": plainLanes,
		"publisher": "kafkapub.Publisher.Publish (one message per call, as watermill-kafka's Publish)", "mark": "one UPDATE ... WHERE id = ANY($1) per batch"}))
	res.Cost, res.Round = c, round
	return e.withDelivery(ctx, res, topic)
}

// plainLoop claims, publishes and marks until the deadline passes, ctx
// ends, or, with poll 0, a claim finds nothing; with poll, it waits that
// long after a claim that came back short of its batch and claims again.
// It returns how many events it published.
func plainLoop(ctx context.Context, s *schemaDB, pub message.Publisher, claim, mark, topic string, deadline time.Time, poll time.Duration) (int, error) {
	total := 0
	for ctx.Err() == nil && time.Now().Before(deadline) {
		rows, err := plainClaim(ctx, s, claim)
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
			if _, merr := s.SQL.ExecContext(ctx, mark, acked); merr != nil {
				if ctx.Err() != nil {
					break
				}
				return total, fmt.Errorf("plain: mark: %w", merr)
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

// plainClaim claims a batch and returns it in id order.
func plainClaim(ctx context.Context, s *schemaDB, claim string) ([]plainRow, error) {
	out, err := claimSorted(ctx, s, claim, plainBatch, func(rows *sql.Rows) (plainRow, error) {
		var r plainRow
		err := rows.Scan(&r.id, &r.agg, &r.payload)
		return r, err
	}, func(r plainRow) int64 { return r.id })
	if err != nil {
		return nil, fmt.Errorf("plain: %w", err)
	}
	return out, nil
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
