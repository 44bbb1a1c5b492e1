package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

// outbox runs the CLI in-process and returns its exit code and output.
// outbox runs the CLI to completion with an empty environment, so what the
// caller exported (DATABASE_URL, OUTBOX_*) cannot change the outcome.
func outbox(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return outboxEnv(t, nil, args...)
}

func TestMigrateCommands(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	flags := []string{"--database-url", db.URL, "--schema", db.Schema}

	code, out, errOut := outbox(t, append([]string{"migrate", "up"}, flags...)...)
	if code != 0 || !strings.Contains(out, "applied version(s) 1, 2, 3, 4, 5, 6") {
		t.Fatalf("migrate up: %d %q %q", code, out, errOut)
	}
	code, out, _ = outbox(t, append([]string{"migrate", "up", "--json"}, flags...)...)
	if code != 0 || strings.TrimSpace(out) != "{\n  \"applied\": []\n}" {
		t.Fatalf("second migrate up --json: %d %q", code, out)
	}
	code, out, _ = outbox(t, append([]string{"migrate", "status", "--json"}, flags...)...)
	var st []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st) != 12 || st[0]["applied_at"] == nil || st[1]["applied_at"] == nil {
		t.Fatalf("migrate status --json: %d %q", code, out)
	}
	code, out, _ = outbox(t, append([]string{"migrate", "status"}, flags...)...)
	if code != 0 || !strings.Contains(out, "0001") || strings.Contains(out, "pending") {
		t.Fatalf("migrate status: %d %q", code, out)
	}
	for range 2 { // converts, then finds nothing to do
		code, out, errOut = outbox(t, append([]string{"migrate", "partition", "--size", "1000"}, flags...)...)
		if code != 0 || !strings.Contains(out, "partitioned") {
			t.Fatalf("migrate partition: %d %q %q", code, out, errOut)
		}
	}
	var kind string
	if err := db.SQL.QueryRow(`SELECT relkind::text FROM pg_class WHERE oid = 'outbox'::regclass`).Scan(&kind); err != nil || kind != "p" {
		t.Fatalf("outbox relkind after migrate partition = %q, %v", kind, err)
	}
	if code, _, _ = outbox(t, append([]string{"migrate", "partition", "--set", "inbox"}, flags...)...); code != 2 {
		t.Fatalf("migrate partition --set inbox: exit %d, want 2", code)
	}
	code, out, _ = outbox(t, append([]string{"migrate", "down"}, flags...)...)
	if code != 0 || !strings.Contains(out, "reverted version 12") {
		t.Fatalf("migrate down: %d %q", code, out)
	}
	code, out, _ = outbox(t, append([]string{"migrate", "status"}, flags...)...)
	if code != 0 || !strings.Contains(out, "pending") {
		t.Fatalf("migrate status after down: %d %q", code, out)
	}
}

func TestMigrateExport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, out, errOut := outbox(t, "migrate", "export", "--format", "goose", "--dir", dir, "--table", "events")
	if code != 0 || !strings.Contains(out, "0001_outbox.sql") {
		t.Fatalf("migrate export: %d %q %q", code, out, errOut)
	}
	body, err := os.ReadFile(filepath.Join(dir, "0001_outbox.sql"))
	if err != nil || !strings.HasPrefix(string(body), "-- +goose Up\n") || !strings.Contains(string(body), `CREATE TABLE "events_relays"`) {
		t.Fatalf("exported goose file: %v\n%s", err, body)
	}
}

func TestMigrateInboxSet(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	code, out, errOut := outbox(t, "migrate", "up", "--set", "inbox", "--database-url", db.URL, "--schema", db.Schema)
	if code != 0 || !strings.Contains(out, "applied version(s) 1\n") {
		t.Fatalf("migrate up --set inbox: %d %q %q", code, out, errOut)
	}
	var ok bool
	if err := db.SQL.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, db.Schema+".inbox").Scan(&ok); err != nil || !ok {
		t.Fatalf("inbox table missing: %v %v", ok, err)
	}
}
