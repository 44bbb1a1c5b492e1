package harness

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"time"
)

// dbRow is what the verifier needs of an outbox row.
type dbRow struct {
	id          int64
	topic       string
	aggregateID string
	state       string
	attempts    int
	lastError   string
	createdAt   time.Time
	notBefore   sql.NullTime
}

// readOutbox returns the outbox rows by event id.
func readOutbox(ctx context.Context, env *Env) (map[string]dbRow, error) {
	names, err := env.names()
	if err != nil {
		return nil, err
	}
	rows, err := env.DB.SQL.QueryContext(ctx, env.q(`SELECT id, event_id::text, topic, aggregate_id, state, attempts, coalesce(last_error, ''), created_at, not_before FROM `+names.Table))
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	defer rows.Close()
	out := map[string]dbRow{}
	for rows.Next() {
		var (
			r  dbRow
			id string
		)
		if err := rows.Scan(&r.id, &id, &r.topic, &r.aggregateID, &r.state, &r.attempts, &r.lastError, &r.createdAt, &r.notBefore); err != nil {
			return nil, fmt.Errorf("read outbox: %w", err)
		}
		out[id] = r
	}
	return out, rows.Err()
}

// Verify compares the broker's records with the database's committed
// events. It reads the outbox after the relays drained it and the broker up
// to its end offsets.
//
// Order is judged on first deliveries only (a replay's second delivery is a
// duplicate, not a violation), and not for the events in unordered: events
// that were dead and retried by an operator. The documented policy is that
// a dead event does not block its aggregate, so when it is retried it
// legitimately arrives after later events of its key. Such an event is
// skipped entirely, so it does not raise the bar for the events after it
// either; every other event is still checked.
//
// With rank (WAL mode), order is each row's position in commit order, as
// rank gives it, instead of its id.
func Verify(ctx context.Context, env *Env, broker string, topics []string, unordered map[string]bool, rank map[int64]int64) (Result, map[string]dbRow, error) {
	byID, err := readOutbox(ctx, env)
	if err != nil {
		return Result{}, nil, err
	}
	var (
		res       Result
		delivered = map[string]bool{}
		first     = map[string]Delivery{} // event id -> its first delivery, to describe a duplicate
		lastFirst = map[string]int64{}    // topic/key -> highest row id first-delivered so far
	)
	res.Committed = len(byID)
	err = ReadAll(ctx, broker, topics, func(d Delivery) error {
		res.Records++
		row, known := byID[d.EventID]
		if !known {
			res.Phantom++
			res.note("phantom record %s/%d@%d event_id=%q", d.Topic, d.Partition, d.Offset, d.EventID)
			return nil
		}
		if row.topic != d.Topic || row.aggregateID != d.Key {
			res.Misrouted++
			res.note("event %s (row %d) is in the outbox as %s key %q, on the broker as %s key %q", d.EventID, row.id, row.topic, row.aggregateID, d.Topic, d.Key)
		}
		if delivered[d.EventID] {
			res.Duplicates++
			res.noteDuplicate(first[d.EventID], d, row)
			return nil
		}
		delivered[d.EventID] = true
		first[d.EventID] = d
		// The producer stamps the record when it sends it (Sarama, to the
		// millisecond, truncated); the claim took the row no earlier than
		// its not_before by the database's clock, the same machine's.
		if row.notBefore.Valid && d.Timestamp.Before(row.notBefore.Time.Add(-time.Millisecond)) {
			res.Early++
			res.note("early: row %d (event %s) published at %s, not before %s", row.id, d.EventID, d.Timestamp.Format(time.RFC3339Nano), row.notBefore.Time.Format(time.RFC3339Nano))
		}
		if unordered[d.EventID] {
			res.Unordered++
			return nil
		}
		k := d.Topic + "\x00" + d.Key
		pos := row.id
		if rank != nil {
			r, ok := rank[row.id]
			if !ok {
				return fmt.Errorf("row %d (event %s) is not in the commit order", row.id, d.EventID)
			}
			pos = r
		}
		if last, ok := lastFirst[k]; ok && pos < last {
			res.OrderViolations++
			res.note("order violation: key %q of %s: row %d (order %d) first delivered after order %d", d.Key, d.Topic, row.id, pos, last)
		} else {
			lastFirst[k] = pos
		}
		return nil
	})
	if err != nil {
		return Result{}, nil, err
	}
	res.DeliveredUnique = len(delivered)
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return byID[ids[i]].id < byID[ids[j]].id })
	holdsUntil := map[string]time.Time{} // topic/key -> latest not_before of its rows so far
	for _, id := range ids {
		r := byID[id]
		k := r.topic + "\x00" + r.aggregateID
		if r.notBefore.Valid {
			res.Delayed++
		}
		if until, ok := holdsUntil[k]; ok && until.After(r.createdAt) && delivered[id] {
			res.HeldBehindDelay++
		}
		if r.notBefore.Valid && r.notBefore.Time.After(holdsUntil[k]) {
			holdsUntil[k] = r.notBefore.Time
		}
		switch {
		case r.state == "dead":
			res.Dead++
			res.DeadEvents = append(res.DeadEvents, DeadEvent{EventID: id, Topic: r.topic, AggregateID: r.aggregateID, Error: r.lastError, Delivered: delivered[id]})
		case !delivered[id]:
			res.Lost++
			res.note("lost: row %d event %s (%s key %q) state %s last_error %q", r.id, id, r.topic, r.aggregateID, r.state, r.lastError)
		}
		if r.state != "dead" && r.state != "published" {
			res.Unsettled++
		}
	}
	return res, byID, nil
}
