package publish

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the delay before try number attempt (from 1): base ×
// 2^(attempt-1), capped at limit, with "equal jitter" (half fixed, half
// random) so that many events failing together do not retry together.
func Backoff(attempt int, base, limit time.Duration) time.Duration {
	d := limit
	if attempt < 1 {
		attempt = 1
	}
	if attempt <= 40 {
		if exp := base << (attempt - 1); exp > 0 && exp < limit {
			d = exp
		}
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// Sleep waits d or until ctx ends, and reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
