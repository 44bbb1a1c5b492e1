package testkit

import "testing"

// Long skips t under -short. The development loop (go test -short) leaves
// out the scenarios that take tens of seconds each (the crash suite, the
// scale scenarios, long WAL scenarios; kafkatest.LockCluster skips the
// tests on the real Kafka cluster); the README's command, which CI runs,
// runs every one of them.
func Long(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: skips %s (the README's test command runs it)", what)
	}
}
