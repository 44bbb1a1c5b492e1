package relay

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestSpreadTickerTicksFirstWithinItsPeriod: the first tick comes at a
// random point of the first period, the later ones a period apart.
func TestSpreadTickerTicksFirstWithinItsPeriod(t *testing.T) {
	const d = 200 * time.Millisecond
	var firsts []time.Duration
	for range 5 {
		start := time.Now()
		s := newSpreadTicker(d)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if !s.tick(ctx) {
			t.Fatal("no first tick")
		}
		first := time.Since(start)
		if !s.tick(ctx) {
			t.Fatal("no second tick")
		}
		second := time.Since(start) - first
		s.Stop()
		cancel()
		if first > d+50*time.Millisecond {
			t.Errorf("first tick after %s, want within the period %s", first, d)
		}
		if second < d-20*time.Millisecond {
			t.Errorf("second tick %s after the first, want the period %s", second, d)
		}
		firsts = append(firsts, first)
	}
	slices.Sort(firsts)
	if firsts[len(firsts)-1]-firsts[0] < 5*time.Millisecond {
		t.Errorf("five tickers' first ticks %v: all at the same point of the period", firsts)
	}
	for _, d := range []time.Duration{0, 1, 2, time.Second} {
		if p := randomPhase(d); p <= 0 || p > max(d, 1) {
			t.Errorf("randomPhase(%s) = %s, want in (0, %s]", d, p, d)
		}
	}
}
