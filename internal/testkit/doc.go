// Package testkit gives txoutbox's tests real infrastructure: an isolated
// PostgreSQL schema per test on the local server, and the addresses of the
// MariaDB and S3 servers .ci/services runs (MySQLURL, S3Server). It is a
// module of its own, which requires pgx: a module whose tests use it lists
// it, but a user's module graph does not get its requirements, and the
// root module, whose tests on PostgreSQL are in integration/dbtests,
// requires neither. The Kafka-protocol broker is in internal/kafkatest,
// another module.
//
// It imports no MySQL driver: the relay module, whose tests use it,
// would then require one, and so would every PostgreSQL user's module
// graph. A test on MySQL (ForEachEngine,
// NewDBOn) registers go-sql-driver/mysql itself, which only the modules
// users do not import may do (integration, cmd/outbox, examples); the
// write side's tests on every engine are in integration/engines.
//
// A missing server fails the test with instructions; it never skips, so a
// CI run without a database cannot pass by testing nothing.
package testkit
