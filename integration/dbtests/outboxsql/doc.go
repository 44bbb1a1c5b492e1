// Package outboxsql holds the tests of internal/outboxsql that need
// PostgreSQL: every statement prepares, and the claim's and the
// operators' plans do the work of their batch at two sizes. They live
// here, not beside the code, because a database needs a driver and a
// module's go.mod requires what its tests import: the root module
// requires no pgx (see docs/development.md, "Modules").
package outboxsql
