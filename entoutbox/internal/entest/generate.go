// Package entest is the ent code generated for entoutbox's tests, from
// ./schema with entoutbox's extension.
package entest

//go:generate go run entc.go
