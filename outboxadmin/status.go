package outboxadmin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
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
	// does not exist in the database (the polling relay publishes).
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
// Fleet often and the others less often, as the console does.
func (a *Admin) Status(ctx context.Context) (Status, error) {
	if err := a.CheckSchema(ctx); err != nil {
		return Status{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	stats, err := txoutbox.ReadTopicStats(ctx, a.db, a.cfg.Table)
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
	if st.Slot, err = a.slot(ctx); err != nil {
		return Status{}, fmt.Errorf("outboxadmin: status: %w", err)
	}
	relays, err := a.relays(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("outboxadmin: status: %w", err)
	}
	byID := map[string]int{}
	for i, r := range relays {
		byID[r.ID] = i
	}
	rows, err := a.db.QueryContext(ctx, a.sql.shards)
	if err != nil {
		return Status{}, fmt.Errorf("outboxadmin: status: read shards: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			shard int
			owner string
		)
		if err := rows.Scan(&shard, &owner); err != nil {
			return Status{}, fmt.Errorf("outboxadmin: status: read shards: %w", err)
		}
		i, ok := byID[owner]
		if ok {
			relays[i].Shards = append(relays[i].Shards, shard)
		}
		if !ok || !relays[i].Alive {
			st.Unowned = append(st.Unowned, shard)
		}
	}
	if err := rows.Err(); err != nil {
		return Status{}, fmt.Errorf("outboxadmin: status: read shards: %w", err)
	}
	st.Relays = relays
	return st, nil
}

// Lag reads how long the oldest due unpublished event has been due (since
// its created_at, or its NotBefore if later), by the database clock (zero
// when there is none; an event scheduled for later is not lag): the lag of
// Status, Snapshot, the relays' metrics and txoutbox.ReadStats, from one
// entry of the due index (schema version 7).
func (a *Admin) Lag(ctx context.Context) (time.Duration, error) {
	if err := a.CheckSchema(ctx); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	var (
		oldest sql.NullTime
		now    time.Time
	)
	if err := a.db.QueryRowContext(ctx, a.sql.lag).Scan(&oldest, &now); err != nil {
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
// events. Its cost grows with the number of topics, not of events.
func (a *Admin) TopicStats(ctx context.Context) ([]txoutbox.TopicStats, error) {
	if err := a.CheckSchema(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	rows, err := a.db.QueryContext(ctx, a.sql.topicStats, outboxsql.CountArgs{Cap: txoutbox.TopicStatsMax}.Args()...)
	if err != nil {
		return nil, fmt.Errorf("outboxadmin: read topic stats: %w", err)
	}
	defer rows.Close()
	var out []txoutbox.TopicStats
	for rows.Next() {
		var (
			t   txoutbox.TopicStats
			lag sql.NullFloat64
		)
		if err := rows.Scan(&t.Topic, &t.Backlog, &lag, &t.Dead, &t.Scheduled); err != nil {
			return nil, fmt.Errorf("outboxadmin: read topic stats: %w", err)
		}
		if lag.Valid {
			t.Lag = max(time.Duration(lag.Float64*float64(time.Second)), 0)
		}
		t.BacklogAtLeast, t.DeadAtLeast = t.Backlog >= txoutbox.TopicStatsMax, t.Dead >= txoutbox.TopicStatsMax
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outboxadmin: read topic stats: %w", err)
	}
	return out, nil
}

// Handovers reads the shards in handover (Status.Handovers) among the
// oldest 10,000 unpublished events (ten default claim batches), where a
// claim looks first: it reads that many claim index entries at most,
// whatever the backlog.
func (a *Admin) Handovers(ctx context.Context) ([]int, error) {
	if err := a.CheckSchema(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	out, err := a.handovers(ctx)
	if err != nil {
		return nil, fmt.Errorf("outboxadmin: status: %w", err)
	}
	return out, nil
}

func (a *Admin) handovers(ctx context.Context) ([]int, error) {
	rows, err := a.db.QueryContext(ctx, a.sql.handovers, outboxsql.OpsHandoverWindow)
	if err != nil {
		return nil, fmt.Errorf("read handovers: %w", err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var shard int
		if err := rows.Scan(&shard); err != nil {
			return nil, fmt.Errorf("read handovers: %w", err)
		}
		out = append(out, shard)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read handovers: %w", err)
	}
	return out, nil
}

func (a *Admin) relays(ctx context.Context) ([]RelayStatus, error) {
	rows, err := a.db.QueryContext(ctx, a.sql.relays)
	if err != nil {
		return nil, fmt.Errorf("read relays: %w", err)
	}
	defer rows.Close()
	var out []RelayStatus
	for rows.Next() {
		var (
			r   RelayStatus
			age float64
		)
		if err := rows.Scan(&r.ID, &r.Host, &r.StartedAt, &r.HeartbeatAt, &age); err != nil {
			return nil, fmt.Errorf("read relays: %w", err)
		}
		r.HeartbeatAge = max(time.Duration(age*float64(time.Second)), 0)
		r.Alive = r.HeartbeatAge < a.cfg.StaleAfter
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read relays: %w", err)
	}
	return out, nil
}

// slotName is the slot name OpsWALSlots looks for besides those it finds
// through the table: Config.Slot, or the WAL relay's default name of
// before the names were keyed by the database (OpsWALSlots computes
// today's).
func (a *Admin) slotName() string {
	if a.cfg.Slot != "" {
		return a.cfg.Slot
	}
	return outboxsql.WALLegacyName(a.cfg.Table.Schema, a.cfg.Table.Name)
}

// slot reads the WAL relay's slot in this database, nil when there is
// none: Config.Slot, or the first slot found through the table.
func (a *Admin) slot(ctx context.Context) (*SlotStatus, error) {
	s := SlotStatus{Name: a.cfg.Slot}
	if s.Name == "" {
		var found string
		if err := a.db.QueryRowContext(ctx, a.sql.walSlots, outboxsql.WALSlotsArgs{Table: a.sql.table, Slot: a.slotName()}.Args()...).Scan(&found); err != nil {
			return nil, fmt.Errorf("look for the WAL relay's slot: %w", err)
		}
		if found == "" {
			return nil, nil
		}
		s.Name, _, _ = strings.Cut(found, ", ")
	}
	var (
		confirmed, plugin, database string
		here                        bool
	)
	err := a.db.QueryRowContext(ctx, a.sql.walSlot, s.Name).Scan(&s.Active, &s.WALStatus, &confirmed, &plugin, &database, &s.LagBytes, &here)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !here {
		return nil, nil // a slot of another database streams another outbox
	}
	if err != nil {
		return nil, fmt.Errorf("read replication slot %s: %w", s.Name, err)
	}
	return &s, nil
}
