package console

import (
	"testing"
	"time"
)

// Counts are paced as the relays pace theirs: every interval while quick,
// then a hundred times what they took.
func TestCountPacing(t *testing.T) {
	for _, tc := range []struct{ interval, took, want time.Duration }{
		{10 * time.Second, 5 * time.Millisecond, 10 * time.Second},
		{10 * time.Second, 24 * time.Millisecond, 10 * time.Second},
		{10 * time.Second, 50 * time.Millisecond, 10 * time.Second},
		{10 * time.Second, 250 * time.Millisecond, 25 * time.Second},
		{time.Second, 30 * time.Millisecond, 3 * time.Second},
	} {
		if got := countPacing(tc.interval, tc.took); got != tc.want {
			t.Errorf("countPacing(%s, %s) = %s, want %s", tc.interval, tc.took, got, tc.want)
		}
	}
}
