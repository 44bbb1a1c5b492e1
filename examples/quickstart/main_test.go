package main

import (
	"testing"

	"github.com/txoutbox/txoutbox/examples/internal/demo"
)

// The README's first command, and its MySQL variant: the quickstart runs
// to the end on PostgreSQL and on MariaDB, with an embedded broker.
func TestQuickstartRuns(t *testing.T) {
	demo.RunOnEveryEngine(t, run)
}
