package relay

import (
	"sync/atomic"
	"time"
)

// stall follows the lanes' publish calls that outlived PublishTimeout and
// have not returned: while one hangs and nothing was acknowledged for
// PublishTimeout, the relay is stalled, claims nothing, and its membership
// gives up its shards so peers publish them.
type stall struct {
	clock   *clock
	timeout time.Duration // Config.PublishTimeout

	// hung counts the lanes whose last publish call outlived the timeout
	// and has not returned; since is when the first of them was given up
	// on, and lastAck when a call last had an event acknowledged, on the
	// relay's clock.
	hung, since, lastAck atomic.Int64
}

// acked records a call that had an event acknowledged.
func (s *stall) acked() { s.lastAck.Store(int64(s.clock.now())) }

// gaveUp records a call a lane gave up on.
func (s *stall) gaveUp() {
	if s.hung.Add(1) == 1 {
		s.since.Store(int64(s.clock.now()))
	}
}

// returned records that a call given up on returned.
func (s *stall) returned() { s.hung.Add(-1) }

// stalled reports whether the relay cannot make progress: a publish call
// outlived PublishTimeout and has not returned, and no event was
// acknowledged for PublishTimeout since.
func (s *stall) stalled() bool {
	if s.hung.Load() == 0 {
		return false
	}
	last := time.Duration(max(s.lastAck.Load(), s.since.Load()-int64(s.timeout)))
	return s.clock.now()-last >= s.timeout
}

// reset starts a Run with no call hung, as if one was acknowledged now.
func (s *stall) reset() {
	s.hung.Store(0)
	s.lastAck.Store(int64(s.clock.now()))
}
