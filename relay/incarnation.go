package relay

import (
	"sync/atomic"
	"time"
)

// incarnation is one life of a relay in the coordination tables: the id it
// registers, claims rows under (lease_owner) and owns shards under. Every
// Run starts a new one, and so does a relay that dropped claimed rows from
// memory without recording them: after it was declared dead, or when its
// ownership deadline passed while it could not reach the database.
//
// outboxsql.Claim trusts that rows claimed by an incarnation are held in its
// memory (or were acknowledged by the broker). Ending the incarnation
// whenever that stops being true makes its rows someone else's to the next
// claim, even under a fixed Config.ID.
type incarnation struct {
	token string // "<Config.ID>#<random>"

	// deadline is when the incarnation stops publishing, on the relay's
	// monotonic clock (see clock): its last successful heartbeat plus
	// StaleAfter less a heartbeat, so it stops before peers can declare
	// it dead and publish its rows themselves.
	deadline atomic.Int64
	ended    atomic.Bool
	// expired is set when the deadline, not end, ended the incarnation;
	// told says the relay has logged that once.
	expired atomic.Bool
	told    atomic.Bool
}

func newIncarnation(name string) *incarnation {
	return &incarnation{token: name + "#" + randomSuffix()}
}

// live reports whether rows claimed under the incarnation may still be
// published at now. Once false it stays false.
func (i *incarnation) live(now time.Duration) bool {
	if i.ended.Load() {
		return false
	}
	if now >= time.Duration(i.deadline.Load()) {
		if i.ended.CompareAndSwap(false, true) {
			i.expired.Store(true)
		}
		return false
	}
	return true
}

// extend moves the deadline to until, never back.
func (i *incarnation) extend(until time.Duration) {
	for {
		cur := i.deadline.Load()
		if int64(until) <= cur || i.deadline.CompareAndSwap(cur, int64(until)) {
			return
		}
	}
}

// end ends the incarnation: nothing claimed under it is published any
// more.
func (i *incarnation) end() { i.ended.Store(true) }

// clock is the relay's monotonic clock: durations since the relay was
// built. Go's monotonic readings keep running while the process is stopped
// (SIGSTOP) or the machine is suspended, so a relay that wakes after a long
// pause sees its deadline passed before it publishes anything.
type clock struct{ base time.Time }

func (c *clock) now() time.Duration { return time.Since(c.base) }
