package relay

import (
	"testing"
	"time"
)

func TestBackoffGrowsWithJitterUpToTheCap(t *testing.T) {
	t.Parallel()
	base, limit := time.Second, time.Minute
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 6: 32 * time.Second, 7: time.Minute, 100: time.Minute} {
		for range 50 {
			d := backoff(attempt, base, limit)
			if d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", attempt, d, want/2, want)
			}
		}
	}
}
