// Package testkit gives txoutbox's tests real infrastructure: an isolated
// PostgreSQL schema per test on the local server. It depends on the root
// module's requirements only, so every library module's tests can use it;
// the Kafka-protocol broker is in internal/kafkatest, a module of its own.
//
// A missing PostgreSQL fails the test with instructions; it never skips, so a
// CI run without a database cannot pass by testing nothing.
package testkit
