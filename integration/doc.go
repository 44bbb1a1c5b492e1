// Package integration is txoutbox's end-to-end crash, outage and
// concurrency suite. It has no API: its tests run real processes against
// real PostgreSQL and prove the outbox's promise (every committed event is
// delivered, nothing rolled back is delivered, per-aggregate order holds)
// under the faults deployments see:
//
//   - SIGKILLed relays restarted under fresh ids (crash) and under their
//     own fixed id within the lease, as a StatefulSet does (same-id-restart);
//
//   - relays paused (SIGSTOP) past StaleAfter and the lease while the broker
//     holds produce requests past the lease (pause-slow-broker), and the
//     reported repro of a slow broker during same-id restarts
//     (slow-broker-same-id);
//
//   - network partitions through a loopback TCP proxy that freezes (silence,
//     sockets open) or drops (a reset) one relay's PostgreSQL connections or
//     every relay's broker connections (partition);
//
//   - operators running the outbox CLI under load: dead retry, dead drop,
//     replay and their dry runs, with poison events to work on (admin-ops);
//
//   - PostgreSQL crashed with stop -m immediate, on a cluster of the
//     scenario's own, port 5439 (db-crash);
//
//   - commit-order gaps, a broker outage, lost database connections, poison
//     events and relays joining and leaving;
//
//   - all of them at once (mixed; the soak).
//
// The broker is a kfakeproc child per scenario, or, with -broker kafka and
// in the tests named *Kafka, the real 3-node Apache Kafka cluster of
// .ci/services (replication factor 3, min.insync.replicas = 2), where each
// fault is made on the cluster's own processes: a broker outage SIGKILLs
// every node and starts them again (log recovery); a slow broker pauses
// (SIGSTOP) the node leading most partitions past the lease; a broker
// partition freezes or drops TCP proxies in front of every node (the
// nodes' PROXIED listeners advertise them); leader-election SIGKILLs the
// busiest leader again and again while relays restart under their own ids.
//
//	go test -race -count=1 ./integration/             # the CI-sized suite, about 7.5 minutes on 2 cores
//	go test -count=1 -timeout 4h ./integration/ -run Mixed -soak  # every fault over ≥ 1,000,000 events
//	go run ./integration/chaos [-soak] [-seed N]     # the same scenarios, standalone
//	go run ./integration/chaos -broker kafka          # all of them on the real cluster
//	go run ./integration/chaos -scale                 # production sizes and durations (TestScale* are CI's small ones)
//
// Every scenario ends with the line
//
//	chaos: committed=N rolled_back=M delivered_unique=N lost=0 phantom=0 order_violations=0 duplicates=D dead=P crashes=K same_id_restarts=S pauses=Z partitions=X admin_ops=A db_crashes=C broker=kfake
//
// (with leader_kills=L where a scenario killed leaders, conn_losses=R
// where the server ended the relays' connections, mode=wal in WAL mode,
// db=mariadb on MariaDB, broker=kafka on the real cluster) and fails on any lost, phantom or
// out-of-order event. Order is judged on first deliveries per key; events
// an operator retried from dead are left out of it (a dead event does not
// block its aggregate, so it arrives after later events of its key when
// retried), every other event is checked. An
// event dropped from dead is not lost; a writer transaction that failed at
// a database crash may or may not have committed, and is accepted either
// way, but if its events are in the outbox they must be delivered.
//
// Duplicates are allowed (delivery is at least once) but bounded: each
// fault that can interrupt a relay between the broker's acknowledgement and
// the mark may duplicate at most one in-flight window, the relay's
// MaxInFlight (2 × batch; 200 here), per affected relay: a SIGKILL or a
// same-id restart, a pause, a database partition one window; a broker
// outage, a broker partition, a held produce window or a database crash one
// per live relay. A replay adds the rows it replayed. A clean rebalance adds
// none. The machinery is in internal/harness; the broker process is
// internal/kfakeproc.
package integration
