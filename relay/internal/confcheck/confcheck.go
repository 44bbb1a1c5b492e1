// Package confcheck is the defaults-and-floors scaffolding the two relay
// modes' Configs share: a zero field takes its default, and a field below
// its floor is refused with an error that names it.
//
// walrelay, a module of its own under relay/, imports it as it does
// package publish (see its doc), so its API is a contract between the two
// modules: change it only in ways the walrelay versions already released
// still compile against.
package confcheck

import (
	"fmt"
	"time"
)

// Number is the type of a Config field with a default and a floor.
type Number interface {
	int | int64 | time.Duration
}

// Default sets *v to def when it is zero.
func Default[T Number](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// Field is one Config field to check against its floor: a constant, or
// another field's value, which Of then names.
type Field[T Number] struct {
	Name     string
	V, Floor T
	Of       string
}

// Floors returns an error wrapping invalid for the first field below its
// floor ("Lanes 0 is below its floor 1", "BackoffMax 1s is below its
// floor, BackoffMin (2s)"), or nil when none is.
func Floors[T Number](invalid error, fields ...Field[T]) error {
	for _, f := range fields {
		switch {
		case f.V >= f.Floor:
		case f.Of == "":
			return fmt.Errorf("%w: %s %v is below its floor %v", invalid, f.Name, f.V, f.Floor)
		default:
			return fmt.Errorf("%w: %s %v is below its floor, %s (%v)", invalid, f.Name, f.V, f.Of, f.Floor)
		}
	}
	return nil
}
