package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin/console"
)

// A console on a table older than its Admin needs answers every page 503,
// saying to run outbox migrate up, and shows no figures.
func TestConsoleRefusesAnOlderSchema(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Options{})
	testkit.RevertOutboxTo(t, b.db.SQL, b.db.Table(), 7)
	for _, path := range []string{"", "dead", "api/overview"} {
		code, body := b.get(t, path)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "run outbox migrate up") {
			t.Errorf("GET /%s: %d %q; want 503 saying to run outbox migrate up", path, code, body)
		}
	}
}
