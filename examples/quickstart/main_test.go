package main

import (
	"context"
	"testing"
	"time"
)

// The README's first command: the quickstart runs to the end, on the
// local PostgreSQL (or DATABASE_URL) and an embedded broker.
func TestQuickstartRuns(t *testing.T) {
	t.Setenv("KAFKA_BROKERS", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		t.Fatal(err)
	}
}
