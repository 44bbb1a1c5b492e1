package outboxadmin

import (
	"context"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox"
)

// Status is the state of an outbox and its relays.
type Status struct {
	// Stats are backlog, lag and dead count, in total and per topic.
	txoutbox.Stats
	// Relays are the registered relays, alive or stale, by id.
	Relays []RelayStatus
	// Unowned lists the shards no live relay owns. Their events are not
	// published until a relay takes them (within a heartbeat of one
	// running).
	Unowned []int
	// Handovers lists the shards in handover: a live relay other than the
	// owner still holds claimed rows of them (the previous owner finishing
	// its batch). The new owner publishes their later events once those
	// are done; a shard that stays here points at a stuck relay.
	Handovers []int
	// Slot is the WAL relay's replication slot (Config.Slot), nil when it
	// does not exist in the database (the polling relay publishes; always
	// on MySQL, which has no WAL relay).
	Slot *SlotStatus
}

// SlotStatus is the WAL relay's replication slot.
type SlotStatus struct {
	Name string
	// Active is whether a relay streams from it.
	Active bool
	// WALStatus is PostgreSQL's wal_status: reserved or extended are fine,
	// unreserved means the slot is about to pass max_slot_wal_keep_size,
	// lost means WAL it needed is gone (see outbox wal takeover).
	WALStatus string
	// LagBytes is the WAL the slot holds back behind the server's current
	// position: what to alert on.
	LagBytes int64
}

// RelayStatus is one registered relay.
type RelayStatus struct {
	ID          string
	Host        string
	StartedAt   time.Time
	HeartbeatAt time.Time
	// HeartbeatAge is the heartbeat's age by the database clock.
	HeartbeatAge time.Duration
	// Alive is HeartbeatAge < Config.StaleAfter. A stale relay's row is
	// deleted, and its shards taken over, by the next live relay's
	// heartbeat.
	Alive bool
	// Shards are the shards it owns, ascending.
	Shards []int
}

// Status reads the outbox's figures (txoutbox.ReadTopicStats), the relays and
// their shards: Fleet, TopicStats and Handovers at once. Its counts read a
// bounded number of index entries (txoutbox.StatsExactMax, and
// txoutbox.TopicStatsMax per topic); a dashboard that polls reads Lag and
// Fleet often and the others less often, as the console does. On MySQL
// it reads the totals alone (txoutbox.ReadStats' fields; Stats.Topics is
// empty): the MySQL schema has no index of the dead events by topic (see
// TopicStats).
func (a *Admin) Status(ctx context.Context) (Status, error) {
	if err := a.CheckSchema(ctx); err != nil {
		return Status{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	stats, err := a.db.stats(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("outboxadmin: status: %w", err)
	}
	st, err := a.Fleet(ctx)
	if err != nil {
		return Status{}, err
	}
	st.Stats = stats
	if st.Handovers, err = a.Handovers(ctx); err != nil {
		return Status{}, err
	}
	return st, nil
}

// Fleet reads the relays, their shards, the shards no live relay owns and
// the WAL relay's slot: Status without Stats and Handovers. It reads the
// small coordination tables only.
func (a *Admin) Fleet(ctx context.Context) (Status, error) {
	if err := a.CheckSchema(ctx); err != nil {
		return Status{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	var (
		st  Status
		err error
	)
	if st.Slot, err = a.db.slot(ctx); err != nil {
		return Status{}, fmt.Errorf("outboxadmin: status: %w", err)
	}
	relays, err := a.db.relays(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("outboxadmin: status: read relays: %w", err)
	}
	byID := map[string]int{}
	for i := range relays {
		relays[i].Alive = relays[i].HeartbeatAge < a.cfg.StaleAfter
		byID[relays[i].ID] = i
	}
	shards, err := a.db.shards(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("outboxadmin: status: read shards: %w", err)
	}
	for _, s := range shards {
		i, ok := byID[s.owner]
		if ok {
			relays[i].Shards = append(relays[i].Shards, s.shard)
		}
		if !ok || !relays[i].Alive {
			st.Unowned = append(st.Unowned, s.shard)
		}
	}
	st.Relays = relays
	return st, nil
}

// Lag reads how long the oldest due unpublished event has been due (since
// its created_at, or its NotBefore if later), by the database clock (zero
// when there is none; an event scheduled for later is not lag): the lag of
// Status, Snapshot, the relays' metrics and txoutbox.ReadStats, from one
// entry of the due index (schema version 7; on MySQL one per lane).
func (a *Admin) Lag(ctx context.Context) (time.Duration, error) {
	if err := a.CheckSchema(ctx); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	oldest, now, err := a.db.lag(ctx)
	if err != nil {
		return 0, fmt.Errorf("outboxadmin: read lag: %w", err)
	}
	if !oldest.Valid {
		return 0, nil
	}
	return max(now.Sub(oldest.Time), 0), nil
}

// TopicStats reads backlog, lag, dead and scheduled counts per topic, in
// topic order, each count up to txoutbox.TopicStatsMax (see
// txoutbox.ReadTopicStats); the backlog does not count the scheduled
// events. Its cost grows with the number of topics, not of events. On
// MySQL it returns an error matching errors.ErrUnsupported and reads
// nothing, as txoutbox.ReadTopicStats does: the schema has no index of the
// dead events by topic.
func (a *Admin) TopicStats(ctx context.Context) ([]txoutbox.TopicStats, error) {
	if err := a.CheckSchema(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	out, err := a.db.topicStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("outboxadmin: read topic stats: %w", err)
	}
	return out, nil
}

// Handovers reads the shards in handover (Status.Handovers) among the
// oldest 10,000 unpublished events (ten default claim batches), where a
// claim looks first: it reads that many claim index entries at most
// (on MySQL, that many of each lane's), whatever the backlog.
func (a *Admin) Handovers(ctx context.Context) ([]int, error) {
	if err := a.CheckSchema(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	out, err := a.db.handovers(ctx)
	if err != nil {
		return nil, fmt.Errorf("outboxadmin: status: read handovers: %w", err)
	}
	return out, nil
}
