package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay"
)

// The naive relay of the design articles: claim a batch with SKIP LOCKED in
// a short transaction, publish the rows one by one, and mark each row in its
// own statement.
const (
	naiveClaimSQL = `
UPDATE {{table}} SET state = 'claimed'
WHERE id IN (
    SELECT id FROM {{table}} WHERE state = 'pending'
    ORDER BY id LIMIT $1
    FOR UPDATE SKIP LOCKED)
RETURNING id, event_id::text, topic, aggregate_type, aggregate_id, event_type, content_type, payload, created_at`
	naiveMarkSQL = `UPDATE {{table}} SET state = 'published', published_at = now() WHERE id = $1`
)

// The naive relay on MySQL, which has no UPDATE ... RETURNING: the claim is
// a locking read and an UPDATE of the ids it returned in one short READ
// COMMITTED transaction (claimLocked).
const (
	naiveClaimMySQL = `
SELECT id, event_id, topic, aggregate_type, aggregate_id, event_type, content_type, payload, created_at
FROM {{table}} WHERE state = 'pending'
ORDER BY id LIMIT ?
FOR UPDATE SKIP LOCKED`
	// naiveClaimedMySQL ends in "IN": inList adds the ids.
	naiveClaimedMySQL = `UPDATE {{table}} SET state = 'claimed' WHERE id IN`
	naiveMarkMySQL    = `UPDATE {{table}} SET state = 'published', published_at = UTC_TIMESTAMP(6) WHERE id = ?`
)

// naiveBatch is the sketch's batch size.
const naiveBatch = 100

type naiveRow struct {
	id int64
	ev txoutbox.Event
}

// runNaive drains the backlog with the naive loop (one worker) publishing
// through the same watermill-kafka publisher as the relay.
func runNaive(ctx context.Context, e *env) (throughput, error) {
	s, err := e.newSchema(ctx, "naive")
	if err != nil {
		return throughput{}, err
	}
	defer s.close()
	topic, err := e.topic(ctx, "bench.naive")
	if err != nil {
		return throughput{}, err
	}
	n := e.opts.naiveEvents
	if err := insertBacklog(ctx, s, topic, n, e.opts.aggregates, "pending", 0); err != nil {
		return throughput{}, err
	}
	pub, err := e.loopPublisher()
	if err != nil {
		return throughput{}, err
	}
	defer pub.Close()
	mark := s.Names.Render(naiveMarkSQL)
	if s.mysql {
		mark = s.Names.Render(naiveMarkMySQL)
	}

	m := e.startMeter(ctx, s.SQL)
	start := time.Now()
	deadline := start.Add(e.opts.timeout)
	marked := 0
	for {
		if time.Now().After(deadline) {
			return throughput{}, fmt.Errorf("naive: %w", &incompleteError{Published: int64(marked), Backlog: int64(n), Elapsed: time.Since(start)})
		}
		rows, err := naiveClaim(ctx, s)
		if err != nil {
			return throughput{}, err
		}
		if len(rows) == 0 {
			break
		}
		for _, r := range rows {
			if err := pub.Publish(r.ev.Topic, relay.Message(r.ev)); err != nil {
				return throughput{}, fmt.Errorf("naive: publish: %w", err)
			}
			if _, err := s.SQL.ExecContext(ctx, mark, r.id); err != nil {
				return throughput{}, fmt.Errorf("naive: mark: %w", err)
			}
			marked++
		}
	}
	took := time.Since(start)
	c := m.stop(ctx, n)
	res := newThroughput("naive", n, took, map[string]any{"workers": 1, "batch": naiveBatch, "publisher": "kafkapub.Publisher.Publish (one message per call, as watermill-kafka's Publish)", "mark": "one UPDATE per row"})
	res.Cost = c
	return e.withDelivery(ctx, res, topic)
}

// naiveClaim runs the claim in its own short transaction (the statement's;
// on MySQL, naiveClaimMySQL's) and returns the rows oldest first, as the
// sketch publishes them.
func naiveClaim(ctx context.Context, s *schemaDB) ([]naiveRow, error) {
	scan := func(rows *sql.Rows) (naiveRow, error) {
		var (
			r  naiveRow
			id string
		)
		if err := rows.Scan(&r.id, &id, &r.ev.Topic, &r.ev.AggregateType, &r.ev.AggregateID, &r.ev.Type,
			&r.ev.ContentType, &r.ev.Payload, &r.ev.CreatedAt); err != nil {
			return r, err
		}
		var err error
		if r.ev.ID, err = uuid.Parse(id); err != nil {
			return r, fmt.Errorf("event id: %w", err)
		}
		return r, nil
	}
	id := func(r naiveRow) int64 { return r.id }
	var (
		out []naiveRow
		err error
	)
	if s.mysql {
		out, err = claimLocked(ctx, s, s.Names.Render(naiveClaimMySQL), s.Names.Render(naiveClaimedMySQL), naiveBatch, scan, id)
	} else {
		out, err = claimSorted(ctx, s, s.Names.Render(naiveClaimSQL), naiveBatch, scan, id)
	}
	if err != nil {
		return nil, fmt.Errorf("naive: %w", err)
	}
	return out, nil
}

// claimSorted runs a claim statement, one short transaction of its own,
// scans its rows and sorts them by id: UPDATE ... RETURNING does not keep
// the subquery's order, and the loops publish oldest first.
func claimSorted[T any](ctx context.Context, s *schemaDB, claim string, batch int, scan func(*sql.Rows) (T, error), id func(T) int64) ([]T, error) {
	rows, err := s.SQL.QueryContext(ctx, claim, batch)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		r, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	slices.SortFunc(out, func(a, b T) int { return cmp.Compare(id(a), id(b)) })
	return out, nil
}
