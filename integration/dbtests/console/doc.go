// Package console holds the tests of outboxadmin/console that need
// PostgreSQL. They live here, not beside the code, because a database
// needs a driver and a module's go.mod requires what its tests import:
// the root module requires no pgx (see docs/development.md, "Modules").
package console
