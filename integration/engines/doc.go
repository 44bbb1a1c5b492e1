// Package engines holds the tests that run on every engine
// (testkit.ForEachEngine: PostgreSQL and MySQL/MariaDB): the Writer, the
// migrator, outboxtest, the inbox, relaytest.Drain and the operators' API
// (outboxadmin) here, gormoutbox's and entoutbox's in the packages below;
// and the relay's claim cycle on MySQL (internal/mysqlclaim) and the
// operators' MySQL statements (internal/outboxsql/mysql_ops.go), on MySQL
// only.
//
// They live in the integration module, not beside the code they test,
// because a test on MySQL needs a MySQL driver (go-sql-driver/mysql, GORM's
// MySQL dialector), and a module whose tests import a package requires its
// module: every user of the root module, gormoutbox, entoutbox or inbox
// would then find the driver in their module graph
// (integration/modgraph proves they do not).
package engines
