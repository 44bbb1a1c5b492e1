package relay

import (
	"context"
	"sync"
)

// lane publishes the rows of the aggregates hashed to it, one at a time, in
// the order they were claimed, so each aggregate's events reach the broker
// in id order.
//
// When a row fails, the lane fences its aggregate: every later row of it is
// released unpublished, so none can overtake the failed row, until the
// failure and all those releases are committed, and then every row from a
// claim that started before that commit. Claims that start after it see the
// failed row in backoff (the database fence in outboxsql.Claim) and the
// released rows pending again, and return them in id order once the failed
// row is due.
type lane struct {
	r     *Relay
	queue chan *claimedRow

	mu    sync.Mutex
	fence map[string]*fence // by aggregate id
	seen  uint64            // highest claim seq this lane has processed
}

// fence holds back an aggregate's rows.
type fence struct {
	unrecorded int    // failures and releases of the aggregate not yet committed
	upTo       uint64 // rows from claims up to this seq are held back
}

func newLane(r *Relay, capacity int) *lane {
	return &lane{r: r, queue: make(chan *claimedRow, capacity), fence: map[string]*fence{}}
}

func (l *lane) run(ctx context.Context) {
	for row := range l.queue {
		if !row.inc.live(l.r.clock.now()) {
			// Declared dead, or past its deadline: peers may hold
			// this row's aggregate now. Publish nothing more of what
			// the incarnation claimed, and record nothing either.
			l.r.drop(row)
			continue
		}
		if ctx.Err() != nil {
			l.r.completer.release(row, nil) // shutting down: give it back unpublished
			continue
		}
		if l.fenced(row) {
			l.r.completer.release(row, l.hold(row.event.AggregateID))
			continue
		}
		err := l.r.publish(ctx, row)
		if err == nil {
			l.r.outage.Store(0)
			// Marked even if the incarnation ended meanwhile: the
			// broker has it, and the mark applies only if no one
			// claimed the row since.
			l.r.completer.ack(row)
			continue
		}
		l.r.outage.Add(1)
		if !row.inc.live(l.r.clock.now()) {
			l.r.drop(row)
			continue
		}
		l.r.completer.fail(row, err, l.hold(row.event.AggregateID))
	}
}

// fenced reports whether row must be held back, and forgets fences that can
// no longer match: rows arrive in claim order, so once a lane has seen claim
// seq s, no row from an earlier claim follows.
func (l *lane) fenced(row *claimedRow) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if row.seq > l.seen {
		l.seen = row.seq
		for agg, f := range l.fence {
			if f.unrecorded == 0 && f.upTo < row.seq {
				delete(l.fence, agg)
			}
		}
	}
	f, ok := l.fence[row.event.AggregateID]
	return ok && (f.unrecorded > 0 || row.seq <= f.upTo)
}

// hold fences the aggregate until the outcome about to be handed to the
// completer is committed; the returned function is called then, with the
// claim seq current at the commit.
func (l *lane) hold(aggregateID string) func(recordedAt uint64) {
	l.mu.Lock()
	f := l.fence[aggregateID]
	if f == nil {
		f = &fence{}
		l.fence[aggregateID] = f
	}
	f.unrecorded++
	l.mu.Unlock()
	return func(recordedAt uint64) {
		l.mu.Lock()
		f.unrecorded--
		f.upTo = max(f.upTo, recordedAt)
		l.mu.Unlock()
	}
}
