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
	if !Eventually(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// Eventually polls cond every 20ms until it holds or timeout has passed,
// and reports whether it held: WaitFor for a test that says itself what
// it found instead.
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
