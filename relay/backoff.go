package relay

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"time"

	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// backoff is the publish core's Backoff (base × 2^(attempt-1), capped at
// limit, with equal jitter), under the name the relay's retry loops
// (publishes, claims, marks, LISTEN) call it by.
func backoff(attempt int, base, limit time.Duration) time.Duration {
	return publish.Backoff(attempt, base, limit)
}

// sleep is the publish core's Sleep: it waits d or until ctx ends, and
// reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool { return publish.Sleep(ctx, d) }

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

// randomSuffix makes default relay ids unique across restarts of one process.
func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}
