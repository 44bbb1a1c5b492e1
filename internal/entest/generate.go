// Package entest is the ent code generated, from ./schema with entoutbox's
// extension, for entoutbox's tests and the benchmark harness: Order carries
// the mixin, Plain is the same entity without it.
package entest

//go:generate go run entc.go
