package outboxadmin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"
)

// ErrNoSince is returned by Replay without ReplayFilter.Since.
var ErrNoSince = errors.New("outboxadmin: replay needs a start time (Since)")

// ReplayFilter selects published events to replay.
type ReplayFilter struct {
	// Since keeps events published at or after it: what a consumer that
	// lost its state since then has lost. Required.
	Since time.Time
	// Topic and AggregateID, when set, match exactly.
	Topic       string
	AggregateID string
}

// ReplayResult counts the events a replay returned to pending.
type ReplayResult struct {
	Events  int64
	FirstID int64 // lowest row id replayed, 0 if none
	LastID  int64 // highest row id replayed, 0 if none
	// Topics counts the events per topic, sorted by topic.
	Topics []TopicCount
}

// TopicCount is a number of events of one topic.
type TopicCount struct {
	Topic  string
	Events int64
}

// Replay publishes again the published events f selects that are still in
// the outbox (within the relays' retention window), keeping their event ids
// and payloads, for a consumer that lost its state. It does so by returning
// them to pending, in id order, Config.ReplayBatch rows per transaction;
// the running relays publish them.
//
// Going through the relay rather than publishing from here keeps its
// guarantees: at least once (the rows are durable until acknowledged; a
// crash of anything resumes), per-aggregate order (a replayed event has a
// lower id than any later event of its aggregate still pending, so it goes
// first; events already claimed are in flight and may go before), and the
// relay's publisher, lanes and shards. While they drain, the replayed events
// count in the backlog and lag (by their creation time): expect the lag
// alert to see them.
//
// Each batch takes the relays' prune lock, so pruning cannot delete a row
// the replay has just reset. With dryRun nothing changes and the result
// says what would be replayed.
func (a *Admin) Replay(ctx context.Context, f ReplayFilter, dryRun bool) (ReplayResult, error) {
	if f.Since.IsZero() {
		return ReplayResult{}, ErrNoSince
	}
	var (
		res    ReplayResult
		after  int64
		topics = map[string]int64{}
	)
	for {
		n := 0
		err := a.inTx(ctx, dryRun, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, a.sql.pruneLock); err != nil {
				return fmt.Errorf("take the prune lock: %w", err)
			}
			rows, err := tx.QueryContext(ctx, a.sql.replay, after, f.Since, nullString(f.Topic), nullString(f.AggregateID), a.cfg.ReplayBatch)
			if err != nil {
				return fmt.Errorf("reset to pending: %w", err)
			}
			defer rows.Close()
			for rows.Next() {
				var (
					id    int64
					topic string
				)
				if err := rows.Scan(&id, &topic); err != nil {
					return fmt.Errorf("reset to pending: %w", err)
				}
				n++
				topics[topic]++
				if res.FirstID == 0 || id < res.FirstID {
					res.FirstID = id
				}
				// RETURNING is in no particular order.
				after = max(after, id)
			}
			if err := rows.Err(); err != nil {
				return fmt.Errorf("reset to pending: %w", err)
			}
			if n > 0 {
				if _, err := tx.ExecContext(ctx, a.sql.wake); err != nil {
					return fmt.Errorf("notify relays: %w", err)
				}
			}
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("outboxadmin: replay (after %d events): %w", res.Events, err)
		}
		res.Events += int64(n)
		if n < a.cfg.ReplayBatch {
			break
		}
	}
	res.LastID = after
	for t, n := range topics {
		res.Topics = append(res.Topics, TopicCount{Topic: t, Events: n})
	}
	sort.Slice(res.Topics, func(i, j int) bool { return res.Topics[i].Topic < res.Topics[j].Topic })
	return res, nil
}
