// Package mysqlgrammar holds every statement txoutbox sends to MySQL and
// MariaDB to MySQL 8's grammar, with Vitess's parser: the tests run on
// MariaDB, which accepts some syntax MySQL does not. It is a module of its
// own, with tests only, so no user's module graph gains Vitess.
package mysqlgrammar
