package human

import (
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                     "0s",
		1234567 * time.Nanosecond:             "1ms",
		1234 * time.Millisecond:               "1.2s",
		90*time.Second + 400*time.Millisecond: "1m30s",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
}
