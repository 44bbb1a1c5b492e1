package testkit

import (
	"testing"
	"time"
)

// WaitFor polls cond every 20ms until it holds, and fails the test if it
// does not within timeout. Tests wait for what they need instead of
// sleeping a guess.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
