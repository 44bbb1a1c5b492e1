package main

import (
	"cmp"
	"context"
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
	topic := "bench.naive"
	n := e.opts.naiveEvents
	if err := insertBacklog(ctx, s, topic, n, e.opts.aggregates, "pending", 0); err != nil {
		return throughput{}, err
	}
	pub, err := e.kafkaPublisher()
	if err != nil {
		return throughput{}, err
	}
	defer pub.Close()
	claim, mark := s.Names.Render(naiveClaimSQL), s.Names.Render(naiveMarkSQL)

	m := e.startMeter(ctx, s.SQL)
	start := time.Now()
	deadline := start.Add(e.opts.timeout)
	for {
		if time.Now().After(deadline) {
			return throughput{}, fmt.Errorf("naive: backlog not drained after %s", e.opts.timeout)
		}
		rows, err := naiveClaim(ctx, s, claim)
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
		}
	}
	took := time.Since(start)
	c := m.stop(ctx, n)
	res := newThroughput("naive", n, took, map[string]any{"workers": 1, "batch": naiveBatch, "publisher": "watermill-kafka (kafkapub.NewPublisher)", "mark": "one UPDATE per row"})
	res.Cost = c
	d, err := readBack(ctx, e.broker, topic, n, 10*time.Second)
	if err != nil {
		return throughput{}, err
	}
	res.delivery = &d
	return res, nil
}

// naiveClaim runs the claim in its own short transaction (the statement's)
// and sorts the rows by id: UPDATE ... RETURNING does not keep the
// subquery's order, and the sketch publishes oldest first.
func naiveClaim(ctx context.Context, s *schemaDB, claim string) ([]naiveRow, error) {
	rows, err := s.SQL.QueryContext(ctx, claim, naiveBatch)
	if err != nil {
		return nil, fmt.Errorf("naive: claim: %w", err)
	}
	defer rows.Close()
	var out []naiveRow
	for rows.Next() {
		var (
			r  naiveRow
			id string
		)
		if err := rows.Scan(&r.id, &id, &r.ev.Topic, &r.ev.AggregateType, &r.ev.AggregateID, &r.ev.Type,
			&r.ev.ContentType, &r.ev.Payload, &r.ev.CreatedAt); err != nil {
			return nil, fmt.Errorf("naive: claim: %w", err)
		}
		if r.ev.ID, err = uuid.Parse(id); err != nil {
			return nil, fmt.Errorf("naive: event id: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("naive: claim: %w", err)
	}
	slices.SortFunc(out, func(a, b naiveRow) int { return cmp.Compare(a.id, b.id) })
	return out, nil
}
