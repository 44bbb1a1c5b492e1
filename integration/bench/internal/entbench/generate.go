// Package entbench is the ent code the benchmark harness measures the ent
// write path with, generated from ./schema with entoutbox's extension: Order
// carries the outbox mixin, Plain has the same fields without it.
package entbench

//go:generate go run entc.go
