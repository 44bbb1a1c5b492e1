package outboxadmin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/txoutbox/txoutbox"
)

// Lookup selects the events to find: by event id or by aggregate id.
type Lookup struct {
	// EventID is an event's own id (Row.EventID), the one consumers see.
	EventID uuid.UUID
	// AggregateID, when EventID is zero, finds the aggregate's events.
	AggregateID string
	// Limit is the most rows returned, newest first. Default
	// LookupLimitDefault, at most DeadPageMax.
	Limit int
}

// LookupLimitDefault is Lookup.Limit's default.
const LookupLimitDefault = 100

// FindEvents returns the events q selects in any state, newest first,
// without payloads. It finds every unpublished and dead one, and the
// published ones among the newest Config.LookupWindow rows: every path it
// takes is an index, and no index covers the published rows by event or
// aggregate id (one would cost every insert, claim and publish another
// index write). Read an older published event by its row id with Event.
// On MySQL the schema's event and aggregate indexes cover every row, and
// it finds published events of any age.
func (a *Admin) FindEvents(ctx context.Context, q Lookup) ([]Row, error) {
	if err := a.CheckSchema(ctx); err != nil {
		return nil, err
	}
	limit := q.Limit
	if limit == 0 {
		limit = LookupLimitDefault
	}
	if limit < 0 || limit > DeadPageMax {
		return nil, fmt.Errorf("outboxadmin: find events: limit %d is outside 1..%d", limit, DeadPageMax)
	}
	lq := lookupQuery{recent: a.cfg.LookupWindow, limit: limit}
	if q.EventID != uuid.Nil {
		lq.eventID = q.EventID.String()
	} else if lq.aggregate = q.AggregateID; lq.aggregate == "" {
		return nil, errors.New("outboxadmin: find events: no event id or aggregate id given")
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	out, err := a.db.lookup(ctx, lq)
	if err != nil {
		return nil, fmt.Errorf("outboxadmin: find events: %w", err)
	}
	return out, nil
}

// Snapshot is the outbox's totals at one moment, cheap enough to sample
// every few seconds.
type Snapshot struct {
	// Backlog, Lag, DueLag, Dead and Scheduled are the totals
	// (Stats.Topics is empty but in TopicSnapshot's).
	txoutbox.Stats
	// LastID is the highest row id: it grows by one per event written, so
	// two snapshots tell the write rate, and with Backlog and Dead the
	// publish rate (see PublishRate).
	LastID int64
	// At is the database clock when it was read.
	At time.Time
}

// Snapshot reads the totals and the highest row id in one statement on
// the claim, lag, dead-letter and primary-key indexes: at most
// txoutbox.StatsExactMax entries of each count, estimated beyond (see
// txoutbox.Stats), whatever the backlog and the dead letters. On MySQL a
// count that reaches the cap stays there, flagged as estimated (at least
// that many), and DueLag's walk has no cap, as txoutbox.ReadStats reads
// them there.
func (a *Admin) Snapshot(ctx context.Context) (Snapshot, error) {
	if err := a.CheckSchema(ctx); err != nil {
		return Snapshot{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.StatementTimeout)
	defer cancel()
	c, err := a.db.counts(ctx)
	if err != nil {
		return Snapshot{}, fmt.Errorf("outboxadmin: snapshot: %w", err)
	}
	return c.snapshot(), nil
}

// TopicSnapshot is Snapshot with the per-topic figures (TopicStats) in
// Stats.Topics. The totals are Snapshot's, not the topics' sum: a topic's
// figures stop at txoutbox.TopicStatsMax. On MySQL it returns TopicStats'
// error, matching errors.ErrUnsupported: Snapshot reads the totals.
func (a *Admin) TopicSnapshot(ctx context.Context) (Snapshot, error) {
	if err := a.CheckSchema(ctx); err != nil {
		return Snapshot{}, err
	}
	topics, err := a.TopicStats(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	s, err := a.Snapshot(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	s.Topics = topics
	return s, nil
}

// PublishRate estimates the events published per second between two
// snapshots, from the events written (LastID), the backlog's, the dead
// count's and the scheduled count's changes: written - Δbacklog - Δdead -
// Δscheduled is exactly the events
// published, less those an operator replayed and plus those dropped in
// between. Rolled-back writes leave gaps in the ids and count as
// published. Beyond txoutbox.StatsExactMax the counts are estimates: the
// backlog's follows a drain in id order row for row, the dead count's
// moves only when PostgreSQL's statistics do. It is zero when b is not
// after a, and never negative.
func PublishRate(a, b Snapshot) float64 {
	dt := b.At.Sub(a.At).Seconds()
	if dt <= 0 {
		return 0
	}
	n := (b.LastID - a.LastID) - (b.Backlog - a.Backlog) - (b.Dead - a.Dead) - (b.Scheduled - a.Scheduled)
	return max(float64(n)/dt, 0)
}
