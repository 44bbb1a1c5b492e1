// Package testkit gives txoutbox's tests real infrastructure: an isolated
// PostgreSQL schema per test on the local server, and the addresses of the
// MariaDB and S3 servers .ci/services runs (MySQLURL, S3Server). It
// depends on the root module's requirements only, so every library
// module's tests can use it; the Kafka-protocol broker is in
// internal/kafkatest, a module of its own.
//
// A missing server fails the test with instructions; it never skips, so a
// CI run without a database cannot pass by testing nothing.
package testkit
