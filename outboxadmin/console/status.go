package console

import (
	"context"
	"errors"
	"time"

	"github.com/txoutbox/txoutbox/outboxadmin"
)

// statusCache is the status every page and tab shows, read once per
// interval whoever asks: the lag and the relays every interval (a few
// index entries and the small coordination tables), and the counts (the
// totals, the per-topic figures, the handovers: each reads up to a cap of
// index entries, see txoutbox.Stats) paced as the relays pace their
// counts: after a reading whose
// statements took d of countQuick or more, no sooner than countSpacing × d
// after it started, failed or not. Ten tabs polling during an incident
// cost the primary what one does, and a slow count runs a hundredth of the
// time.
type statusCache struct {
	adm      *outboxadmin.Admin
	interval time.Duration
	hist     *history

	mu         chan struct{}      // held while reading: a lock a waiter can give up
	fleet      outboxadmin.Status // Relays, Unowned, Slot
	lag        time.Duration
	fleetAt    time.Time            // local clock of the last fleet reading
	counts     outboxadmin.Snapshot // with Topics
	noTopics   bool                 // the database has no per-topic figures (MySQL)
	handovers  []int
	countsNext time.Time // local clock of the next count
	countsErr  error     // the last count's failure, until the next count

	// A Multi's index reads the totals alone (Snapshot), paced as the
	// counts are, when no count is fresh.
	totalsNext time.Time
	totalsErr  error
	totals     outboxadmin.Snapshot
}

// countSpacing and countQuick are the relay's pacing of its counts
// (relay.Config.StatsInterval): a reading is spaced out to countSpacing
// times its statements' duration once that is countQuick or more.
const (
	countSpacing = 100
	countQuick   = 25 * time.Millisecond
)

func newStatusCache(adm *outboxadmin.Admin, interval time.Duration, hist *history) *statusCache {
	return &statusCache{adm: adm, interval: interval, hist: hist, mu: make(chan struct{}, 1)}
}

// statusView is what the pages show: Status with the figures of the last
// count.
type statusView struct {
	outboxadmin.Status
	// Counted is the database clock of the last count (Backlog, Dead,
	// Topics, Handovers); Lag and the relays are at most one interval old.
	Counted time.Time
	// LastID is the highest row id at the last count.
	LastID int64
	// NoTopics: the database has no per-topic figures (MySQL; see
	// outboxadmin.Admin.TopicStats), and Topics is empty.
	NoTopics bool
}

// get returns the status, reading what is due. Concurrent callers wait
// for one reading and share it.
func (c *statusCache) get(ctx context.Context) (statusView, error) {
	// A request that gives up (its client went away) stops waiting for
	// a reading in progress.
	select {
	case c.mu <- struct{}{}:
	case <-ctx.Done():
		return statusView{}, ctx.Err()
	}
	defer func() { <-c.mu }()
	// Once started, a reading finishes and is kept even if this caller
	// gives up (a reload, a tab closed): otherwise a slow count would
	// start over at every request and never finish. Each statement has
	// the admin's own timeout.
	rctx := context.WithoutCancel(ctx)
	now := time.Now()
	if !now.Before(c.countsNext) {
		start := time.Now()
		err := c.count(rctx)
		// A failed count is paced as a slow one, as the relays pace
		// theirs: one that ran into the statement timeout does not run
		// again at the next poll.
		c.countsNext = start.Add(countPacing(c.interval, time.Since(start)))
		c.countsErr = err
		if err != nil {
			return statusView{}, err
		}
	}
	if c.countsErr != nil && c.counts.At.IsZero() {
		// Never counted: the failure until the next count. Once counted,
		// the pages show the last count, with its time.
		return statusView{}, c.countsErr
	}
	if now.Sub(c.fleetAt) >= c.interval {
		fleet, err := c.adm.Fleet(rctx)
		if err != nil {
			return statusView{}, err
		}
		lag, err := c.adm.Lag(rctx)
		if err != nil {
			return statusView{}, err
		}
		c.fleet, c.lag, c.fleetAt = fleet, lag, time.Now()
	}
	v := statusView{Status: c.fleet, Counted: c.counts.At, LastID: c.counts.LastID, NoTopics: c.noTopics}
	v.Stats = c.counts.Stats
	v.Lag = c.lag
	v.Handovers = c.handovers
	return v, nil
}

// readTotals returns backlog, lag and dead count for a Multi's index: the
// last count's when the next is not due, else its own Snapshot (one
// statement on the same indexes, without the per-topic figures), kept
// and paced as the counts are and added to the history. fresh reports
// whether this call read the database.
func (c *statusCache) readTotals(ctx context.Context) (s outboxadmin.Snapshot, fresh bool, err error) {
	select {
	case c.mu <- struct{}{}:
	case <-ctx.Done():
		return outboxadmin.Snapshot{}, false, ctx.Err()
	}
	defer func() { <-c.mu }()
	now := time.Now()
	if now.Before(c.countsNext) && c.countsErr == nil {
		return c.counts, false, nil
	}
	if now.Before(c.totalsNext) {
		return c.totals, false, c.totalsErr
	}
	start := time.Now()
	s, err = c.adm.Snapshot(context.WithoutCancel(ctx))
	c.totalsNext = start.Add(countPacing(c.interval, time.Since(start)))
	c.totalsErr = err
	if err != nil {
		return outboxadmin.Snapshot{}, true, err
	}
	c.totals = s
	c.hist.add(s)
	return s, true, nil
}

// count reads the figures that count rows (up to their caps): the totals
// alone where the database has no per-topic figures.
func (c *statusCache) count(ctx context.Context) error {
	var (
		counts outboxadmin.Snapshot
		err    error
	)
	if !c.noTopics {
		counts, err = c.adm.TopicSnapshot(ctx)
		c.noTopics = errors.Is(err, errors.ErrUnsupported)
	}
	if c.noTopics {
		counts, err = c.adm.Snapshot(ctx)
	}
	if err != nil {
		return err
	}
	handovers, err := c.adm.Handovers(ctx)
	if err != nil {
		return err
	}
	c.counts, c.handovers = counts, handovers
	sample := counts
	sample.Topics = nil // the chart keeps the totals only
	c.hist.add(sample)
	return nil
}

// countPacing is how long after a count whose statements took took the
// next one starts.
func countPacing(interval, took time.Duration) time.Duration {
	if took < countQuick {
		return interval
	}
	return max(interval, countSpacing*took)
}

// readStatus is the shared status (see statusCache).
func (c *Console) readStatus(ctx context.Context) (statusView, error) {
	return c.status.get(ctx)
}
