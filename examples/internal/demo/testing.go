package demo

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

// RunOnEveryEngine is an example's test: it runs the example's run to the
// end on each engine of testkit.ForEachEngine, PostgreSQL (the tests'
// server) and MySQL (the MariaDB of .ci/services: missing, the test
// fails), each with an embedded broker.
func RunOnEveryEngine(t *testing.T, run func(ctx context.Context, databaseURL string) error) {
	t.Helper()
	t.Setenv("KAFKA_BROKERS", "")
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		databaseURL := testkit.ServerURL()
		if e == testkit.MySQL {
			databaseURL = testkit.MySQLURL(t)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := run(ctx, databaseURL); err != nil {
			t.Fatal(err)
		}
	})
}
