package console

import (
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/outboxadmin"
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

// Counts that are not exact show as such: an estimate as ~N, a capped
// count as ≥N.
func TestCountMarks(t *testing.T) {
	count := funcs["count"].(func(int64, bool, string) string)
	matched := funcs["matched"].(func(int64) string)
	for _, tc := range []struct{ got, want string }{
		{count(42, false, "~"), "42"},
		{count(123456, true, "~"), "~123456"},
		{count(10000, true, "≥"), "≥10000"},
		{matched(99), "99"},
		{matched(outboxadmin.CountDeadMax), "≥100000"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
