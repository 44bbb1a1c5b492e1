package main

import (
	"testing"

	"github.com/txoutbox/txoutbox/examples/internal/demo"
)

// go run ./examples/ent, on PostgreSQL and on MariaDB (ent's MySQL
// dialect), runs to the end with an embedded broker.
func TestEntExampleRuns(t *testing.T) {
	demo.RunOnEveryEngine(t, run)
}
