// Package outboxtest runs the Examples of package outboxtest, whose
// output is their documentation, on PostgreSQL, and checks that they are
// the package's own. The root module's Examples are compiled, not run: a
// database needs a driver, and the root module requires no pgx (see
// docs/development.md, "Modules").
package outboxtest
