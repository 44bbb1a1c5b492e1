package relay

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// lane publishes the rows of the aggregates hashed to it in the order they
// were claimed, so each aggregate's events reach the broker in id order.
// With a BatchPublisher it sends the rows queued behind one another
// together, up to Config.LaneBatch, but never two rows of one aggregate at
// once: a row is sent only after its aggregate's previous row has an
// outcome. Otherwise it sends one row at a time.
//
// When a row fails, the lane fences its aggregate: every later row of it is
// released unpublished, so none can overtake the failed row, until the
// failure and all those releases are committed, and then every row from a
// claim that started before that commit. Claims that start after it see the
// failed row in backoff (outboxsql.Claim passes over its aggregate until
// then) and the released rows pending again, and return them in id order
// once the failed row is due.
type lane struct {
	laneDeps
	queue chan *claimedRow
	limit int // the most rows sent at once (Core.Limit)

	mu     sync.Mutex
	fences map[string]*fence // by aggregate id
	seen   uint64            // highest claim seq this lane has processed

	// The lane's publish calls run on a goroutine of their own, so that a
	// call that outlives PublishTimeout can be given up on (see call).
	calls     chan func() []error
	results   chan []error
	timer     *time.Timer
	abandoned bool // the last call was given up on and has not returned yet
}

// fence is the fence on one aggregate: after a failure it holds back the
// aggregate's later rows (see lane).
type fence struct {
	unrecorded int    // failures and releases of the aggregate not yet committed
	upTo       uint64 // rows from claims up to this seq are held back
}

// laneDeps is what a lane publishes with and who it tells: the same for
// every lane of a Run.
type laneDeps struct {
	core      *publish.Core // builds and sends the messages, with spans and the publish metrics
	clock     *clock
	timeout   time.Duration // Config.PublishTimeout
	log       *slog.Logger
	completer *completer // records the outcomes
	budget    *budget    // forgets the rows dropped
	outage    *outage    // counts the calls' outcomes
	stall     *stall     // follows the calls given up on
}

// newLane returns a lane that queues up to capacity rows.
func newLane(d laneDeps, capacity int) *lane {
	l := &lane{laneDeps: d, queue: make(chan *claimedRow, capacity), fences: map[string]*fence{}, limit: d.core.Limit(),
		calls: make(chan func() []error), results: make(chan []error, 1), timer: time.NewTimer(time.Hour)}
	l.timer.Stop()
	return l
}

func (l *lane) run(ctx context.Context) {
	go func() {
		for call := range l.calls {
			l.results <- call()
		}
	}()
	defer close(l.calls)
	var (
		next  *claimedRow // taken from the queue, for the next batch
		batch = make([]*claimedRow, 0, l.limit)
		send  = make([]*claimedRow, 0, l.limit)
	)
	for {
		row := next
		if row == nil {
			var ok bool
			if row, ok = <-l.queue; !ok {
				return
			}
		}
		var open bool
		batch, next, open = l.gather(append(batch[:0], row))
		send = l.process(ctx, batch, send[:0])
		if !open {
			return
		}
	}
}

// gather adds to batch the rows already queued, up to the lane's limit,
// and stops before a row of an aggregate the batch holds, which it returns
// as next. open is false once the queue is closed and drained.
func (l *lane) gather(batch []*claimedRow) (_ []*claimedRow, next *claimedRow, open bool) {
	for len(batch) < l.limit {
		select {
		case row, ok := <-l.queue:
			if !ok {
				return batch, nil, false
			}
			for _, b := range batch {
				if b.event.AggregateID == row.event.AggregateID {
					return batch, row, true
				}
			}
			batch = append(batch, row)
		default:
			return batch, nil, true
		}
	}
	return batch, nil, true
}

// process publishes the rows of batch that are still to be published and
// hands every outcome to the completer. send is scratch space.
func (l *lane) process(ctx context.Context, batch, send []*claimedRow) []*claimedRow {
	if l.abandoned {
		l.await(ctx)
	}
	now := l.clock.now()
	expired := 0
	for _, row := range batch {
		switch {
		case !row.inc.live(now):
			// Declared dead, or past its deadline: peers may hold
			// this row's aggregate now. Publish nothing more of what
			// the incarnation claimed, and record nothing either.
			l.budget.drop(row)
		case ctx.Err() != nil:
			l.completer.release(row, nil) // shutting down: give it back unpublished
		case l.fenced(row):
			l.completer.release(row, l.hold(row.event.AggregateID))
		case now >= row.leaseEnds:
			// It waited past its lease behind slower publishes: any
			// relay may claim it again now, and publish it too. Give it
			// back unpublished, with its aggregate's later rows, as
			// after a failure; a new claim takes it in order.
			l.completer.release(row, l.hold(row.event.AggregateID))
			expired++
		default:
			send = append(send, row)
		}
	}
	if expired > 0 {
		l.log.Warn("relay: rows waited past their lease behind slower publishes; released for a new claim", "rows", expired)
	}
	if len(send) == 0 {
		return send
	}
	events := make([]*txoutbox.Event, len(send))
	for i, row := range send {
		events[i] = &row.event
	}
	errs := l.call(len(send), func() []error { return l.core.Send(ctx, events) })
	stopping := ctx.Err() != nil
	l.outage.count(errs, stopping)
	for i, row := range send {
		var err error
		if errs != nil {
			err = errs[i]
		}
		switch {
		case err == nil:
			// Marked even if the incarnation ended meanwhile: the
			// broker has it, and the mark applies only if no one
			// claimed the row since.
			l.completer.ack(row)
		case !row.inc.live(l.clock.now()):
			l.budget.drop(row)
		case stopping && !IsPermanent(err):
			// Shutting down: a publisher that gives up on the
			// cancelled context did not try the event. Give it back
			// without counting an attempt, fenced like a failure (the
			// broker may have it).
			l.completer.release(row, l.hold(row.event.AggregateID))
		default:
			l.completer.fail(row, err, l.hold(row.event.AggregateID))
		}
	}
	clear(batch)
	if l.abandoned {
		// The call still runs and reads send: the next call gets a
		// slice of its own.
		return make([]*claimedRow, 0, l.limit)
	}
	clear(send)
	return send
}

// call runs publish on the lane's publishing goroutine and returns its
// outcome, or, if it has not returned within PublishTimeout, gives up on it:
// every row of the call failed with an unknown outcome (the broker may
// have it or not), and the lane waits for the call to return before it
// makes another (await), so a hung publisher holds one goroutine per lane
// at most.
func (l *lane) call(n int, publish func() []error) []error {
	l.calls <- publish
	l.timer.Reset(l.timeout)
	select {
	case errs := <-l.results:
		l.timer.Stop()
		if errs == nil || slices.Contains(errs, nil) {
			l.stall.acked()
		}
		return errs
	case <-l.timer.C:
	}
	l.abandoned = true
	l.stall.gaveUp()
	l.log.Warn("relay: a publish outlived PublishTimeout; its events are retried", "events", n, "publish_timeout", l.timeout)
	errs := make([]error, n)
	for i := range errs {
		errs[i] = ErrPublishTimeout
	}
	return errs
}

// await waits for the call the lane gave up on to return, or for ctx to
// end (then the lane publishes nothing more: it releases what it holds).
func (l *lane) await(ctx context.Context) {
	select {
	case <-l.results: // its outcome is not used: the rows were failed
		l.abandoned = false
		l.stall.returned()
	case <-ctx.Done():
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
		for agg, f := range l.fences {
			if f.unrecorded == 0 && f.upTo < row.seq {
				delete(l.fences, agg)
			}
		}
	}
	f, ok := l.fences[row.event.AggregateID]
	return ok && (f.unrecorded > 0 || row.seq <= f.upTo)
}

// hold fences the aggregate until the outcome about to be handed to the
// completer is committed; the returned function is called then, with the
// claim seq current at the commit.
func (l *lane) hold(aggregateID string) func(recordedAt uint64) {
	l.mu.Lock()
	f := l.fences[aggregateID]
	if f == nil {
		f = &fence{}
		l.fences[aggregateID] = f
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

// laneSet is a Run's lanes.
type laneSet []*lane

// queue hands row to its aggregate's lane: always the same one, so the
// aggregate's events are published one after another in claim (id) order.
func (ls laneSet) queue(row *claimedRow) {
	ls[publish.Lane(row.event.AggregateID, len(ls))].queue <- row
}
