package relay

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
	"time"

	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// backoff is the publish core's Backoff (base × 2^(attempt-1), capped at
// limit, with equal jitter), under the name the relay's retry loops
// (publishes, claims, marks, LISTEN) call it by.
func backoff(attempt int, base, limit time.Duration) time.Duration {
	return publish.Backoff(attempt, base, limit)
}

// tick waits for c, a ticker's or timer's channel, or until ctx ends, and
// reports whether ctx is still live: a loop that runs on every tick is
// `for tick(ctx, t.C) { ... }`.
func tick(ctx context.Context, c <-chan time.Time) bool {
	select {
	case <-c:
		return true
	case <-ctx.Done():
		return false
	}
}

// spreadTicker is a time.Ticker of period d whose first tick comes at a
// random point of its first period, so that the rounds of a Group's tables
// (and of relays started together) fall at different moments of each
// period. Started together and aligned, a hundred tables' heartbeats, floor
// rounds and prunes ran in the same instant every period, a burst of
// statements the claims queued behind. Receive with tick, or call ticked
// after each receive from C.
type spreadTicker struct {
	*time.Ticker
	d      time.Duration
	phased bool
}

func newSpreadTicker(d time.Duration) *spreadTicker {
	return &spreadTicker{Ticker: time.NewTicker(randomPhase(d)), d: d}
}

// ticked sets the ticker's period to d after its first tick.
func (s *spreadTicker) ticked() {
	if !s.phased {
		s.phased = true
		s.Reset(s.d)
	}
}

// tick is the package's tick on s.C.
func (s *spreadTicker) tick(ctx context.Context) bool {
	if !tick(ctx, s.C) {
		return false
	}
	s.ticked()
	return true
}

// randomPhase is a random duration in (0, d]; d itself when d < 2ns.
func randomPhase(d time.Duration) time.Duration {
	if d < 2 {
		return max(d, 1)
	}
	return time.Duration(rand.Int64N(int64(d))) + 1
}

// randomSuffix makes default relay ids unique across restarts of one process.
func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}
