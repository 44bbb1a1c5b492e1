package relay

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/google/uuid"
)

// After a NOTIFY, or a claim that found rows, the dispatcher polls every
// hotPollInterval for hotPollWindow: writers send at most one NOTIFY per
// txoutbox.WriterConfig.NotifyInterval (50ms by default), so rows committed
// just after a NOTIFY are found within hotPollInterval instead of at the next
// PollInterval.
const (
	hotPollInterval = 10 * time.Millisecond
	hotPollWindow   = 100 * time.Millisecond
)

// outageThreshold is how many publishes in a row must fail, with none
// succeeding, before the dispatcher backs off between claims.
const outageThreshold = 3

// dispatch claims due rows and hands them to the lanes until ctx ends. It
// claims the next batch while earlier ones publish (bounded by MaxInFlight),
// and waits for a NOTIFY, the poll interval or free capacity otherwise.
func (r *Relay) dispatch(ctx context.Context) {
	poll := time.NewTicker(r.cfg.PollInterval)
	defer poll.Stop()
	var (
		more     = true // the last claim was full: claim again at once
		dbErrors int
		hotUntil time.Time // poll every hotPollInterval until then
		hot      = time.NewTimer(time.Hour)
	)
	defer hot.Stop()
	for ctx.Err() == nil {
		free := r.cfg.MaxInFlight - int(r.inflight.Load())
		if free < min(r.cfg.BatchSize, r.cfg.MaxInFlight)/2 {
			// Wait for room: claiming a sliver at a time costs a
			// round trip per sliver.
			select {
			case <-r.capacity:
			case <-poll.C:
			case <-ctx.Done():
				return
			}
			continue
		}
		if !more {
			if wait := time.Until(hotUntil); wait > 0 {
				hot.Reset(min(wait, hotPollInterval))
			}
			select {
			case <-r.wake:
				hotUntil = time.Now().Add(hotPollWindow)
			case <-hot.C:
			case <-poll.C:
			case <-r.capacity:
				if r.inflight.Load() != 0 {
					continue // not a reason to look for new rows yet
				}
			case <-ctx.Done():
				return
			}
		}
		if n := r.outage.Load(); n >= outageThreshold {
			// The last publishes all failed: the broker is likely down.
			// Back off before claiming more rows only to fail them. A
			// lone poison event retrying stays below the threshold.
			if !sleep(ctx, backoff(int(n-outageThreshold+1), 50*time.Millisecond, 5*time.Second)) {
				return
			}
		}
		rows, err := r.claim(ctx, min(r.cfg.BatchSize, free))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			dbErrors++
			d := backoff(dbErrors, 100*time.Millisecond, 10*time.Second)
			r.log.Warn("relay: claim failed; retrying", "err", err, "in", d)
			if !sleep(ctx, d) {
				return
			}
			more = true
			continue
		}
		dbErrors = 0
		more = len(rows) == min(r.cfg.BatchSize, free)
		if len(rows) > 0 {
			r.met.batchSize.Record(ctx, int64(len(rows)))
			hotUntil = time.Now().Add(hotPollWindow)
		}
		r.inflight.Add(int64(len(rows)))
		for _, row := range rows {
			r.laneFor(row.event.AggregateID).queue <- row
		}
	}
}

// laneFor picks the lane of an aggregate: always the same one, so its events
// are published one after another in claim (id) order.
func (r *Relay) laneFor(aggregateID string) *lane {
	h := fnv.New32a()
	h.Write([]byte(aggregateID))
	return r.lanes[h.Sum32()%uint32(len(r.lanes))]
}

// claim runs the claim statement and returns the rows in id order.
func (r *Relay) claim(ctx context.Context, limit int) ([]*claimedRow, error) {
	r.shardMu.Lock()
	defer r.shardMu.Unlock()
	if len(r.unconfirmed) > 0 {
		if err := r.releaseUnconfirmed(ctx); err != nil {
			return nil, err
		}
	}
	if r.ownedShards == "{}" {
		return nil, nil
	}
	seq := r.claimSeq.Add(1)
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("claim batch: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, r.sql.claimPlan); err != nil {
		return nil, fmt.Errorf("claim batch: plan settings: %w", err)
	}
	rows, err := tx.QueryContext(ctx, r.sql.claim, r.cfg.ID, limit, intervalLiteral(r.cfg.LeaseDuration), r.ownedShards)
	if err != nil {
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	out, err := scanClaimed(rows, seq)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		r.unconfirmed = out
		return nil, fmt.Errorf("claim batch: commit: %w", err)
	}
	// UPDATE ... RETURNING does not keep the subquery's order.
	slices.SortFunc(out, func(a, b *claimedRow) int { return cmp.Compare(a.id, b.id) })
	return out, nil
}

// releaseUnconfirmed returns to pending the rows of a claim whose commit
// was not confirmed, if it committed after all, so they are claimed again in
// order instead of waiting for their lease while later events of their
// aggregates go ahead.
func (r *Relay) releaseUnconfirmed(ctx context.Context) error {
	res, err := r.db.ExecContext(ctx, r.sql.release, idArray(r.unconfirmed), r.cfg.ID)
	if err != nil {
		return fmt.Errorf("release rows of an unconfirmed claim: %w", err)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		r.log.Warn("relay: released rows of a claim whose commit was not confirmed", "rows", n)
	}
	r.unconfirmed = nil
	return nil
}

func scanClaimed(rows *sql.Rows, seq uint64) ([]*claimedRow, error) {
	defer rows.Close()
	var out []*claimedRow
	for rows.Next() {
		var (
			c       = &claimedRow{seq: seq}
			eventID string
			headers string
		)
		e := &c.event
		if err := rows.Scan(&c.id, &eventID, &e.Topic, &e.AggregateType, &e.AggregateID, &e.Type,
			&e.ContentType, &e.Payload, &headers, &e.CreatedAt, &c.attempts); err != nil {
			return nil, fmt.Errorf("claim batch: scan: %w", err)
		}
		var err error
		if e.ID, err = uuid.Parse(eventID); err != nil {
			return nil, fmt.Errorf("claim batch: row %d: event id: %w", c.id, err)
		}
		if headers != "{}" {
			if err := json.Unmarshal([]byte(headers), &e.Headers); err != nil {
				return nil, fmt.Errorf("claim batch: row %d: headers: %w", c.id, err)
			}
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	return out, nil
}

// intervalLiteral renders d for a $n::interval parameter.
func intervalLiteral(d time.Duration) string {
	return fmt.Sprintf("%d microseconds", d.Microseconds())
}
