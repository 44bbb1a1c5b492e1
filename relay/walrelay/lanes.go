package walrelay

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// txn is one committed transaction read from the slot, or the backlog the
// relay publishes from the table when it creates the slot. Its events are
// settled (published, or dead) by the lanes; the slot is confirmed past
// end only once every event of it and of every earlier transaction is.
type txn struct {
	end     uint64 // the transaction's end LSN: confirming it releases the transaction
	events  []event
	pending atomic.Int64 // events not yet settled
}

// work is one event on its way to a lane: a pointer into its
// transaction's events, so queues and batches copy two words per event.
type work struct {
	ev *event
	tx *txn
}

// lanes publish events concurrently, each aggregate on one lane: a lane
// publishes its events in the order they were pushed, the queued ones
// together when the publisher is a relay.BatchPublisher but never two of
// one aggregate at once, retrying each until it is published or dead.
type lanes struct {
	laneDeps
	settled chan struct{} // signalled when a transaction's last event settles
	lanes   []*lane
	wg      sync.WaitGroup
	cancel  context.CancelFunc
}

type lane struct {
	mu    sync.Mutex
	queue []work
	wake  chan struct{}
}

// laneDeps is what the lanes publish with and settle through: the same
// for every session of a Run.
type laneDeps struct {
	core                   *publish.Core // builds and sends the messages, with spans and the publish metrics
	rows                   *tableRows    // marks the dead
	met                    *metrics
	log                    *slog.Logger
	maxAttempts            int // Config.MaxAttempts
	backoffMin, backoffMax time.Duration
}

// newLanes starts n lanes, which run until stop or until ctx ends.
func newLanes(ctx context.Context, n int, d laneDeps) *lanes {
	ctx, cancel := context.WithCancel(ctx)
	ls := &lanes{laneDeps: d, settled: make(chan struct{}, 1), cancel: cancel}
	for range n {
		l := &lane{wake: make(chan struct{}, 1)}
		ls.lanes = append(ls.lanes, l)
		ls.wg.Add(1)
		go func() {
			defer ls.wg.Done()
			ls.run(ctx, l)
		}()
	}
	return ls
}

// push hands t's events to their lanes; a transaction without events
// settles at once.
func (ls *lanes) push(t *txn) {
	t.pending.Store(int64(len(t.events)))
	if len(t.events) == 0 {
		ls.signal()
		return
	}
	for i := range t.events {
		ev := &t.events[i]
		l := ls.lanes[publish.Lane(ev.e.AggregateID, len(ls.lanes))]
		l.mu.Lock()
		l.queue = append(l.queue, work{ev: ev, tx: t})
		l.mu.Unlock()
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

func (ls *lanes) signal() {
	select {
	case ls.settled <- struct{}{}:
	default:
	}
}

// stop ends the lanes after the publishes in progress and waits for them.
func (ls *lanes) stop() {
	ls.cancel()
	ls.wg.Wait()
}

// run publishes l's events until ctx ends: the events queued behind one
// another together (see take), each settled before the lane moves on.
func (ls *lanes) run(ctx context.Context, l *lane) {
	limit := ls.core.Limit()
	var batch []work
	for ctx.Err() == nil {
		batch = l.take(batch[:0], limit)
		if len(batch) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-l.wake:
				continue
			}
		}
		if !ls.deliver(ctx, batch) {
			return
		}
		clear(batch)
	}
}

// take moves the events at the head of l's queue to batch, up to limit,
// stopping before a second event of an aggregate: each event is sent only
// once its aggregate's previous one settled.
func (l *lane) take(batch []work, limit int) []work {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
queue:
	for n < len(l.queue) && n < limit {
		for _, b := range batch {
			if b.ev.e.AggregateID == l.queue[n].ev.e.AggregateID {
				break queue
			}
		}
		batch = append(batch, l.queue[n])
		l.queue[n] = work{}
		n++
	}
	l.queue = l.queue[n:]
	return batch
}

// deliver publishes the events of batch, of distinct aggregates, and
// settles each: published, or dead after MaxAttempts failures when the
// last is the event's own fault (relay.IsPermanent). Those the broker
// acknowledged settle at once; the failed ones are retried together after
// one backoff. It reports whether every event settled, false only when
// ctx ended first.
func (ls *lanes) deliver(ctx context.Context, batch []work) bool {
	pending := batch[:0] // rewritten in place: the caller clears it after
	for _, w := range batch {
		if w.ev.bad == nil {
			pending = append(pending, w)
			continue
		}
		if !ls.dead(ctx, w.ev, 0, w.ev.bad) {
			return false
		}
		if w.tx.pending.Add(-1) == 0 {
			ls.signal()
		}
	}
	if len(pending) == 0 {
		return true
	}
	for attempt := 1; ; attempt++ {
		errs := ls.send(ctx, pending)
		failed := pending[:0]
		for i, w := range pending {
			var err error
			if errs != nil {
				err = errs[i]
			}
			switch {
			case err == nil:
				ls.met.published.Add(ctx, 1)
			case attempt >= ls.maxAttempts && relay.IsPermanent(err):
				// Only the event's own fault makes it dead, as in the
				// polling relay: an outage of any length does not.
				if !ls.dead(ctx, w.ev, attempt, err) {
					return false
				}
			default:
				ls.log.Warn("publish failed; retrying", "event_id", w.ev.e.ID, "topic", w.ev.e.Topic, "attempt", attempt, "err", err)
				failed = append(failed, w)
				continue
			}
			if w.tx.pending.Add(-1) == 0 {
				ls.signal()
			}
		}
		clear(pending[len(failed):])
		if len(failed) == 0 {
			return true
		}
		pending = failed
		if !publish.Sleep(ctx, publish.Backoff(attempt, ls.backoffMin, ls.backoffMax)) {
			return false
		}
	}
}

// send publishes ws through the publish core (together when the
// publisher batches) and returns each one's error (nil when all were
// published).
func (ls *lanes) send(ctx context.Context, ws []work) []error {
	events := make([]*txoutbox.Event, len(ws))
	for i, w := range ws {
		events[i] = &w.ev.e
	}
	return ls.core.Send(ctx, events)
}

// dead records that the broker refused ev for good, or that its row
// cannot be decoded (ev.bad): its row is marked dead (retried until the
// database takes it, as the slot must not pass an event that is neither
// published nor recorded, unless the row is gone from the table); a
// table-less event is logged and dropped.
func (ls *lanes) dead(ctx context.Context, ev *event, attempts int, cause error) bool {
	ls.met.dead.Add(ctx, 1)
	if ev.row == 0 {
		ls.log.Error("table-less event dropped: the broker refused it", "event_id", ev.e.ID, "topic", ev.e.Topic,
			"aggregate_id", ev.e.AggregateID, "attempts", attempts, "err", cause)
		return true
	}
	reason, what := cause.Error(), "event is dead: the broker refused it"
	if ev.bad != nil {
		reason, what = "cannot decode: "+ev.bad.err.Error(), "event is dead: its row cannot be decoded"
	}
	for try := 1; ; try++ {
		err := ls.rows.markDead(ctx, ev.row, attempts, reason)
		if errors.Is(err, errRowGone) {
			ls.log.Error("event dropped: the broker refused it, and its row is gone from the table", "event_id", ev.e.ID, "row", ev.row, "topic", ev.e.Topic, "err", cause)
			return true
		}
		if err == nil {
			ls.log.Error(what, "event_id", ev.e.ID, "row", ev.row, "topic", ev.e.Topic, "attempts", attempts, "err", cause)
			return true
		}
		ls.log.Warn("mark event dead failed; retrying", "row", ev.row, "err", err)
		if !publish.Sleep(ctx, publish.Backoff(try, ls.backoffMin, ls.backoffMax)) {
			return false
		}
	}
}
