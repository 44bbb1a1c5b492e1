// Package testkit gives txoutbox's tests real infrastructure: an isolated
// PostgreSQL schema per test on the local server, and the addresses of the
// MariaDB and S3 servers .ci/services runs (MySQLURL, S3Server). It
// depends on the root module's requirements only, so every library
// module's tests can use it; the Kafka-protocol broker is in
// internal/kafkatest, a module of its own.
//
// It imports no MySQL driver: the root module would then require it, and
// so would every user's module graph. A test on MySQL (ForEachEngine,
// NewDBOn) registers go-sql-driver/mysql itself, which only the modules
// users do not import may do (integration, cmd/outbox, examples); the
// write side's tests on every engine are in integration/engines.
//
// A missing server fails the test with instructions; it never skips, so a
// CI run without a database cannot pass by testing nothing.
package testkit
