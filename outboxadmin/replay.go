package outboxadmin

import (
	"context"
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
// them to pending; the running relays publish them.
//
// Going through the relay rather than publishing from here keeps its
// guarantees: at least once (the rows are durable until acknowledged; a
// crash of anything resumes), per-aggregate order, and the relay's
// publisher, lanes and shards. Each aggregate's selected rows return to
// pending in one statement, so the relays publish them as one run in id
// order: a relay claims no later event of the aggregate while an earlier one
// is pending, and no claim runs while a batch commits. Only events already
// in flight when an aggregate's rows are reset can go out before them. Aggregates are reset
// Config.ReplayBatch rows (whole aggregates) per transaction. While they
// drain, the replayed events count in the backlog and lag (by their
// creation time): expect the lag alert to see them.
//
// Replay first reads the selected rows' ids into memory (16 bytes and the
// aggregate id per row). Each transaction takes the relays' prune lock, so
// pruning cannot delete a row the replay has just reset (on MySQL, which
// has none, the replay's row locks hold a prune back, and the prune then
// finds the rows no longer published). With dryRun nothing changes and
// the result says what would be replayed.
//
// While a WAL relay's slot streams the table, Replay changes nothing and
// returns ErrWALStreamed (never on MySQL, which has no WAL relay).
func (a *Admin) Replay(ctx context.Context, f ReplayFilter, dryRun bool) (ReplayResult, error) {
	if f.Since.IsZero() {
		return ReplayResult{}, ErrNoSince
	}
	if err := a.CheckSchema(ctx); err != nil {
		return ReplayResult{}, err
	}
	sctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	err := refuseWhileStreamed(a.db.walSlots(sctx))
	var groups []replayGroup
	if err == nil {
		groups, err = a.replaySelection(sctx, f)
	}
	cancel()
	if errors.Is(err, ErrWALStreamed) {
		return ReplayResult{}, err
	}
	if err != nil {
		return ReplayResult{}, fmt.Errorf("outboxadmin: replay: %w", err)
	}
	var (
		res    ReplayResult
		topics = map[string]int64{}
	)
	count := func(id int64, topic string) {
		res.Events++
		topics[topic]++
		if res.FirstID == 0 || id < res.FirstID {
			res.FirstID = id
		}
		res.LastID = max(res.LastID, id)
	}
	if dryRun {
		for _, g := range groups {
			for i, id := range g.ids {
				count(id, g.topics[i])
			}
		}
	}
	for len(groups) > 0 && !dryRun {
		var batch []int64
		for len(groups) > 0 && (len(batch) == 0 || len(batch)+len(groups[0].ids) <= a.cfg.ReplayBatch) {
			batch = append(batch, groups[0].ids...)
			groups = groups[1:]
		}
		var done []replayRow // the rows this transaction reset
		err := a.db.inTx(ctx, a.cfg.StatementTimeout, true, func(tx opTx) error {
			done = nil // inTx may run this again (a deadlock's victim)
			if err := refuseWhileStreamed(tx.walSlots(ctx)); err != nil {
				return err
			}
			if err := tx.pruneLock(ctx); err != nil {
				return fmt.Errorf("take the prune lock: %w", err)
			}
			if err := tx.claimGate(ctx); err != nil {
				return fmt.Errorf("hold claims back: %w", err)
			}
			reset, err := tx.replay(ctx, batch)
			if err != nil {
				return fmt.Errorf("reset to pending: %w", err)
			}
			if len(reset) == 0 {
				return nil
			}
			if err := tx.lowerFloor(ctx, batch); err != nil {
				return fmt.Errorf("lower the claim floor: %w", err)
			}
			if err := tx.wake(ctx); err != nil {
				return fmt.Errorf("notify relays: %w", err)
			}
			done = reset
			return nil
		})
		if errors.Is(err, ErrWALStreamed) {
			return res, err
		}
		if err != nil {
			return res, fmt.Errorf("outboxadmin: replay (after %d events): %w", res.Events, err)
		}
		for _, r := range done {
			count(r.id, r.topic)
		}
	}
	for t, n := range topics {
		res.Topics = append(res.Topics, TopicCount{Topic: t, Events: n})
	}
	sort.Slice(res.Topics, func(i, j int) bool { return res.Topics[i].Topic < res.Topics[j].Topic })
	return res, nil
}

// replayGroup is one aggregate's selected rows, in id order.
type replayGroup struct {
	ids    []int64
	topics []string
}

// replaySelection reads the rows f selects and groups them by aggregate,
// in the order of each one's first row, each aggregate's in id order:
// adminDB.replaySelect gives them grouped so (PostgreSQL) or in id order
// (MySQL), which group alike.
func (a *Admin) replaySelection(ctx context.Context, f ReplayFilter) ([]replayGroup, error) {
	rows, err := a.db.replaySelect(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("select: %w", err)
	}
	var (
		groups []replayGroup
		index  = map[string]int{} // aggregate -> its group
	)
	for _, r := range rows {
		i, ok := index[r.aggregate]
		if !ok {
			i = len(groups)
			index[r.aggregate] = i
			groups = append(groups, replayGroup{})
		}
		g := &groups[i]
		g.ids = append(g.ids, r.id)
		g.topics = append(g.topics, r.topic)
	}
	return groups, nil
}
