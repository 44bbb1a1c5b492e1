package main

import (
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

func TestEnvironmentConfiguresEveryFlag(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	e.write(t, "orders", "o-1", "order.placed")

	// Everything from the environment, under the prefix.
	env := map[string]string{"OUTBOX_DATABASE_URL": e.db.URL, "OUTBOX_SCHEMA": e.db.Schema, "OUTBOX_JSON": "true"}
	code, out, errOut := outboxEnv(t, env, "status")
	if code != 0 || !strings.Contains(out, `"backlog": 1`) {
		t.Fatalf("status from the environment: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The legacy DATABASE_URL still works, after OUTBOX_DATABASE_URL.
	code, out, _ = outboxEnv(t, map[string]string{"DATABASE_URL": e.db.URL, "OUTBOX_SCHEMA": e.db.Schema}, "status")
	if code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), "backlog 1 ") {
		t.Errorf("status with DATABASE_URL: exit %d, %q", code, out)
	}
	code, _, errOut = outboxEnv(t, map[string]string{"DATABASE_URL": e.db.URL, "OUTBOX_DATABASE_URL": "postgres://nobody@127.0.0.1:1/x", "OUTBOX_SCHEMA": e.db.Schema}, "status")
	if code != 1 || !strings.Contains(errOut, "connect to database") {
		t.Errorf("OUTBOX_DATABASE_URL must win over DATABASE_URL: exit %d, %q", code, errOut)
	}
	// Flags win over the environment.
	env["OUTBOX_SCHEMA"] = "no_such_schema"
	code, out, errOut = outboxEnv(t, env, "status", "--schema", e.db.Schema, "--json=false")
	if code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), "backlog 1 ") {
		t.Errorf("--schema over OUTBOX_SCHEMA: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// --max-lag from the environment gives the health check's exit code.
	e.exec(t, `UPDATE outbox SET created_at = now() - interval '10 minutes'`)
	env["OUTBOX_SCHEMA"] = e.db.Schema
	env["OUTBOX_MAX_LAG"] = "1m"
	if code, _, errOut := outboxEnv(t, env, "status"); code != exitLagExceeded {
		t.Errorf("OUTBOX_MAX_LAG=1m with a 10m lag: exit %d, stderr %q", code, errOut)
	}
}

func TestBadEnvironmentIsAUsageError(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	id := e.writeDead(t, "orders", "o-1", "order.placed")
	base := map[string]string{"OUTBOX_DATABASE_URL": e.db.URL, "OUTBOX_SCHEMA": e.db.Schema, "OUTBOX_BROKERS": "127.0.0.1:1"}
	with := func(k, v string) map[string]string {
		env := map[string]string{k: v}
		for bk, bv := range base {
			if bk != k {
				env[bk] = bv
			}
		}
		return env
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		msg  []string
	}{
		{with("OUTBOX_MAX_LAG", "soon"), []string{"status"}, []string{"OUTBOX_MAX_LAG", "invalid value"}},
		{with("OUTBOX_JSON", "maybe"), []string{"status"}, []string{"OUTBOX_JSON"}},
		{with("OUTBOX_LIMIT", "lots"), []string{"dead", "list"}, []string{"OUTBOX_LIMIT"}},
		{with("OUTBOX_POLL_INTERVAL", "soon"), []string{"relay"}, []string{"OUTBOX_POLL_INTERVAL"}},
		// A value the flag parses but the relay refuses: the message names the
		// field, and the variables used are listed.
		{with("OUTBOX_BATCH", "-1"), []string{"relay"}, []string{"--batch -1 is below its floor 1", "OUTBOX_BATCH"}},
		{with("OUTBOX_TABLE", "x; drop table y"), []string{"status"}, []string{"invalid table name", "OUTBOX_TABLE"}},
		// What retry, drop and replay change is chosen on the command line only.
		{with("OUTBOX_ALL", "true"), []string{"dead", "retry"}, []string{"say which events"}},
		{with("OUTBOX_YES", "true"), []string{"dead", "drop", "--all"}, []string{"pass --yes"}},
		{with("OUTBOX_SINCE", "1h"), []string{"replay"}, []string{"--since is required"}},
	} {
		code, _, errOut := outboxEnv(t, tc.env, tc.args...)
		if code != exitUsage {
			t.Errorf("%v with %v: exit %d, want %d; stderr %q", tc.args, tc.env, code, exitUsage, errOut)
			continue
		}
		for _, m := range tc.msg {
			if !strings.Contains(errOut, m) {
				t.Errorf("%v with %v: stderr %q does not mention %q", tc.args, tc.env, errOut, m)
			}
		}
	}
	if state, _ := e.state(t, id); state != "dead" {
		t.Errorf("row is %s, want dead: a usage error touched it", state)
	}
}

func TestInboxMigrationIgnoresOutboxTableVariable(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	env := map[string]string{"OUTBOX_DATABASE_URL": db.URL, "OUTBOX_SCHEMA": db.Schema, "OUTBOX_TABLE": "events"}
	if code, out, errOut := outboxEnv(t, env, "migrate", "up", "--set", "inbox"); code != 0 {
		t.Fatalf("migrate up --set inbox: exit %d %q %q", code, out, errOut)
	}
	var n int
	if err := db.SQL.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'inbox'`, db.Schema).Scan(&n); err != nil || n != 1 {
		t.Errorf("inbox table: %d, %v; OUTBOX_TABLE (the outbox's name) must not rename the inbox", n, err)
	}
}
