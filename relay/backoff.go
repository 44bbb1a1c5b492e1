package relay

import (
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
	"time"
)

// backoff returns the delay before try number attempt (from 1): base ×
// 2^(attempt-1), capped at limit, with "equal jitter" (half fixed, half
// random) so that many rows failing together do not retry together.
func backoff(attempt int, base, limit time.Duration) time.Duration {
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

// randomSuffix makes default relay ids unique across restarts of one process.
func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}
