package relay

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/relay/internal/publish"
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
		freeBytes := r.cfg.MaxInFlightBytes - r.inflightBytes.Load()
		if free < r.claimAt() || (freeBytes < roomFor(r.cfg.BatchBytes, r.cfg.MaxInFlightBytes) && r.inflight.Load() > 0) {
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
		if n := r.outageRun(); n >= outageThreshold {
			// The last publishes all failed: the broker is likely down.
			// Back off before claiming more rows only to fail them. A
			// lone poison event retrying stays below the threshold.
			if !sleep(ctx, backoff(n-outageThreshold+1, 50*time.Millisecond, min(5*time.Second, r.cfg.OutageBackoffMax))) {
				return
			}
		}
		budget := min(r.cfg.BatchBytes, max(freeBytes, 1)) // nothing held: one row, however large
		rows, err := r.claimWithin(ctx, min(r.cfg.BatchSize, free), budget)
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
		var bytes int64
		for _, row := range rows {
			bytes += row.bytes
		}
		// Full in rows, or (likely) stopped by the byte budget.
		more = len(rows) == min(r.cfg.BatchSize, free) || (len(rows) > 0 && 2*bytes >= budget)
		if len(rows) > 0 {
			r.met.batchSize.Record(ctx, int64(len(rows)))
			hotUntil = time.Now().Add(hotPollWindow)
		}
		r.inflight.Add(int64(len(rows)))
		r.inflightBytes.Add(bytes)
		for _, row := range rows {
			r.laneFor(row.event.AggregateID).queue <- row
		}
	}
}

// claimAt is the room in flight (MaxInFlight less the rows held) the
// dispatcher waits for before it claims. With room for a batch beside a
// batch in flight, as by default, it is a full batch: every claim reads
// the rows the incarnation holds to pass over them (see outboxsql.Claim),
// so claiming fewer, fuller batches reads fewer of them per row taken
// (measured on the bench, when the claim still carried them through all
// its steps: 7% less PostgreSQL CPU per event than claiming from half a
// batch of room). With less, it is half a batch, so that a few rows slow
// to settle cannot stop the relay from claiming. It is at least one row: a
// claim with no room would take nothing and, looking full, run again at
// once.
func (r *Relay) claimAt() int { return roomFor(r.cfg.BatchSize, r.cfg.MaxInFlight) }

// roomFor is claimAt's rule for a batch and a bound on what is held, in
// rows or in bytes (BatchBytes and MaxInFlightBytes).
func roomFor[T int | int64](batch, limit T) T {
	return max(1, min(batch, limit-batch), min(batch, limit)/2)
}

// laneFor picks the lane of an aggregate: always the same one, so its events
// are published one after another in claim (id) order.
func (r *Relay) laneFor(aggregateID string) *lane {
	return r.lanes[publish.Lane(aggregateID, len(r.lanes))]
}

// claim claims up to limit rows within BatchBytes.
func (r *Relay) claim(ctx context.Context, limit int) ([]*claimedRow, error) {
	return r.claimWithin(ctx, limit, r.cfg.BatchBytes)
}

// claimWithin runs the claim statement for up to limit rows and bytes of
// payload (at least one row), and returns the rows in id order. Only the
// dispatcher calls it.
func (r *Relay) claimWithin(ctx context.Context, limit int, bytes int64) ([]*claimedRow, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
	defer cancel()
	if len(r.unconfirmed) > 0 {
		if err := r.releaseUnconfirmed(ctx); err != nil {
			return nil, err
		}
	}
	inc, shards := r.members.claimable()
	if inc == nil || len(shards) == 0 || r.stalled() {
		return nil, nil
	}
	seq := r.claimSeq.Add(1)
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("claim batch: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, r.sql.claimSettings, outboxsql.TimeoutArgs{Timeout: r.cfg.StatementTimeout}.Args()...); err != nil {
		return nil, fmt.Errorf("claim batch: settings: %w", err)
	}
	args := outboxsql.ClaimArgs{Owner: inc.token, Limit: limit, Lease: r.cfg.LeaseDuration, Shards: shards, Bytes: bytes}
	rows, err := tx.QueryContext(ctx, r.sql.claim, args.Args()...)
	if err != nil {
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	out, bad, err := scanClaimed(rows, seq, inc)
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		if err := r.markUndecodable(ctx, tx, inc, bad); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		r.unconfirmed = out
		return nil, fmt.Errorf("claim batch: commit: %w", err)
	}
	// UPDATE ... RETURNING does not keep the subquery's order.
	slices.SortFunc(out, func(a, b *claimedRow) int { return cmp.Compare(a.id, b.id) })
	return out, nil
}

// markUndecodable makes the claimed rows that cannot become a message dead,
// in the claim's transaction, so they never block a claim again.
func (r *Relay) markUndecodable(ctx context.Context, tx *sql.Tx, inc *incarnation, bad []outboxsql.RowError) error {
	args, err := outboxsql.MarkUndecodableArgs{Rows: bad, Owner: inc.token}.Args()
	if err != nil {
		return fmt.Errorf("claim batch: encode undecodable rows: %w", err)
	}
	if _, err := tx.ExecContext(ctx, r.sql.markUndecodable, args...); err != nil {
		return fmt.Errorf("claim batch: mark undecodable rows dead: %w", err)
	}
	for _, b := range bad {
		r.log.Error("relay: event cannot be decoded; it is dead", "row", b.ID, "err", b.Err)
	}
	r.met.dead.Add(ctx, int64(len(bad)))
	return nil
}

// releaseUnconfirmed returns to pending the rows of a claim whose commit
// was not confirmed, if it committed after all, so they are claimed again in
// order instead of waiting for their lease. The release is durable before
// the incarnation claims again: until then the rows would count as held in
// its memory.
func (r *Relay) releaseUnconfirmed(ctx context.Context) error {
	n, err := r.settle(ctx, func(tx *sql.Tx) (int64, error) {
		var n int64
		for owner, ids := range byOwner(r.unconfirmed) {
			res, err := tx.ExecContext(ctx, r.sql.release, outboxsql.RowsArgs{IDs: ids, Owner: owner}.Args()...)
			if err != nil {
				return 0, err
			}
			m, _ := res.RowsAffected()
			n += m
		}
		return n, nil
	})
	if err != nil {
		return fmt.Errorf("release rows of an unconfirmed claim: %w", err)
	}
	if n > 0 {
		r.log.Warn("relay: released rows of a claim whose commit was not confirmed", "rows", n)
	}
	r.unconfirmed = nil
	return nil
}

// settle runs fn in a transaction that commits durably (see
// outboxsql.SettleSettings) and returns what fn returned.
func (r *Relay) settle(ctx context.Context, fn func(*sql.Tx) (int64, error)) (int64, error) {
	return settle(ctx, r.db, r.sql, r.cfg.StatementTimeout, fn)
}

// settle runs fn in a transaction with the relay's server-side timeouts
// that commits durably.
func settle(ctx context.Context, db *sql.DB, q *statements, timeout time.Duration, fn func(*sql.Tx) (int64, error)) (int64, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, q.settleSettings, outboxsql.TimeoutArgs{Timeout: timeout}.Args()...); err != nil {
		return 0, fmt.Errorf("settings: %w", err)
	}
	n, err := fn(tx)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return n, nil
}

// marksByClaim groups acknowledged rows into one mark per claim: the rows
// of one incarnation's claim share their version (outboxsql.MarkPublished).
// A flush usually holds acknowledgements of one or two claims.
func marksByClaim(rows []*claimedRow) []outboxsql.MarkArgs {
	type claim struct {
		owner   string
		version uint32
	}
	var (
		out []outboxsql.MarkArgs
		at  = make(map[claim]int, 2)
	)
	for _, row := range rows {
		k := claim{row.inc.token, row.version}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, outboxsql.MarkArgs{Owner: k.owner, Version: k.version})
		}
		out[i].IDs = append(out[i].IDs, row.id)
	}
	return out
}

// byOwner groups rows' ids by the incarnation that claimed them.
func byOwner(rows []*claimedRow) map[string][]int64 {
	out := make(map[string][]int64, 1)
	for _, row := range rows {
		out[row.inc.token] = append(out[row.inc.token], row.id)
	}
	return out
}

// scanClaimed reads claimed rows. A row that cannot become a message (its
// headers are not a JSON object of strings) is returned in bad instead, to
// be made dead: one bad row must not fail every claim.
func scanClaimed(rows *sql.Rows, seq uint64, inc *incarnation) (out []*claimedRow, bad []outboxsql.RowError, err error) {
	defer rows.Close()
	for rows.Next() {
		var (
			c       = &claimedRow{seq: seq, inc: inc}
			eventID sql.RawBytes // valid until the next row: decoded at once
			headers sql.RawBytes
		)
		e := &c.event
		if err := rows.Scan(&c.id, &eventID, &e.Topic, &e.AggregateType, &e.AggregateID, &e.Type,
			&e.ContentType, &e.Payload, &headers, &e.CreatedAt, &c.attempts, &c.version); err != nil {
			return nil, nil, fmt.Errorf("claim batch: scan: %w", err)
		}
		if e.ID, err = decodeUUID(eventID); err != nil {
			bad = append(bad, outboxsql.RowError{ID: c.id, Err: storableText("undecodable event: event_id: "+err.Error(), maxErrorText)})
			continue
		}
		if string(headers) != "{}" {
			if err := json.Unmarshal(headers, &e.Headers); err != nil {
				bad = append(bad, outboxsql.RowError{ID: c.id, Err: storableText("undecodable event: headers must be a JSON object of strings: "+err.Error(), maxErrorText)})
				continue
			}
		}
		c.bytes = int64(len(e.Payload))
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("claim batch: %w", err)
	}
	return out, bad, nil
}

// decodeUUID reads an event id as the driver returned it: text, as the
// database/sql drivers for PostgreSQL send a uuid, or its 16 bytes, should
// a driver use the binary format.
func decodeUUID(b []byte) (uuid.UUID, error) {
	if len(b) == 16 {
		return uuid.FromBytes(b)
	}
	return uuid.ParseBytes(b)
}
