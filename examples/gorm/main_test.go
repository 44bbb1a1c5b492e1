package main

import (
	"testing"

	"github.com/txoutbox/txoutbox/examples/internal/demo"
)

// go run ./examples/gorm, on PostgreSQL and on MariaDB (GORM's MySQL
// driver), runs to the end with an embedded broker.
func TestGORMExampleRuns(t *testing.T) {
	demo.RunOnEveryEngine(t, run)
}
