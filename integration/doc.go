// Package integration is txoutbox's end-to-end crash, outage and
// concurrency suite. It has no API: its tests run real processes against
// real PostgreSQL and prove the outbox's promise (every committed event is
// delivered, nothing rolled back is delivered, per-aggregate order holds)
// under SIGKILLed relays, commit-order gaps, a broker outage, lost database
// connections, poison events and relays joining and leaving.
//
//	go test -count=1 ./integration/                 # the CI-sized suite, ~3 minutes
//	go test -count=1 ./integration/ -run Crash -soak  # ≥ 1,000,000 events
//	go run ./integration/chaos [-soak] [-seed N]     # the same scenarios, standalone
//
// Every scenario ends with the line
//
//	chaos: committed=N rolled_back=M delivered_unique=N lost=0 phantom=0 order_violations=0 duplicates=D dead=P crashes=K
//
// and fails on any lost, phantom or out-of-order event. Duplicates are
// allowed (delivery is at least once) but bounded: each fault that can
// interrupt a relay between the broker's acknowledgement and the mark (a
// SIGKILL, a broker stop, a lost connection) may duplicate at most one
// in-flight window, the relay's MaxInFlight (2 × batch; 200 here), and a
// clean rebalance none. The machinery is in internal/harness; the broker
// process is internal/kfakeproc.
package integration
