// Package ent is the ent code of the ent example, generated from ./schema
// with entoutbox's extension.
package ent

//go:generate go run entc.go
