package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// A version the binary does not know (a newer release's) is shown by
// migrate status and refused by migrate up and down, which change
// nothing.
func TestMigrateRefusesAnUnknownVersion(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	testkit.RecordOutboxVersion(t, e.db.SQL, e.db.Table(), 99, "from_the_future")
	latest := migrations.Outbox.Latest()

	code, out, errOut := outbox(t, append([]string{"migrate", "status"}, e.flags...)...)
	if code != 0 || !strings.Contains(out, "0099") || !strings.Contains(out, "from_the_future") || !strings.Contains(out, "unknown to this outbox") {
		t.Errorf("migrate status: exit %d, stdout %q, stderr %q; want version 99 listed as unknown", code, out, errOut)
	}
	code, out, _ = outbox(t, append([]string{"migrate", "status", "--json"}, e.flags...)...)
	var st []migrations.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st) == 0 || st[len(st)-1].Version != 99 || !st[len(st)-1].Unknown {
		t.Errorf("migrate status --json: exit %d, %q; want version 99 last, unknown", code, out)
	}
	for _, action := range []string{"up", "down"} {
		code, out, errOut = outbox(t, append([]string{"migrate", action}, e.flags...)...)
		if code != 1 || !strings.Contains(errOut, "version 99") || strings.Contains(out, "up to date") {
			t.Errorf("migrate %s: exit %d, stdout %q, stderr %q; want exit 1 naming version 99", action, code, out, errOut)
		}
	}
	var applied int
	if err := e.db.SQL.QueryRow(`SELECT count(*) FROM outbox_schema_migrations WHERE version <= $1`, latest).Scan(&applied); err != nil || applied != latest {
		t.Errorf("%d known versions applied after migrate down, %v; want all %d", applied, err, latest)
	}
}

// outboxWithin runs the CLI as outbox does, stopping it after d as SIGTERM
// would: a command that should have refused to start fails the test
// rather than run on.
func outboxWithin(t *testing.T, d time.Duration, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var stdout, stderr testkit.SyncBuffer
	code := run(ctx, testProcess(nil, &stdout, &stderr), args)
	return code, stdout.String(), stderr.String()
}

// The relay, the operator commands and the console refuse a table older
// than they need, naming outbox migrate up, or with a version they do not
// know, naming it, before they start anything.
func TestCommandsRefuseASchemaTheyDoNotMatch(t *testing.T) {
	t.Parallel()
	older, newer := newOps(t), newOps(t)
	testkit.RevertOutboxTo(t, older.db.SQL, older.db.Table(), 8) // the relays need the newest version
	testkit.RecordOutboxVersion(t, newer.db.SQL, newer.db.Table(), 99, "next")
	for _, c := range []struct {
		e       *opsEnv
		mention string
	}{{older, "run outbox migrate up"}, {newer, "version 99"}} {
		id, _ := c.e.write(t, "orders", "o-1", "order.placed")
		for _, args := range [][]string{
			{"relay", "--dev-broker"},
			{"relay", "--dev-broker", "--mode", "wal"},
		} {
			code, out, errOut := outboxWithin(t, 10*time.Second, append(args, c.e.flags...)...)
			if code != 1 || !strings.Contains(errOut, c.mention) || strings.Contains(errOut, "DEVELOPMENT BROKER") || strings.Contains(out, "publishing") {
				t.Errorf("%v at %s: exit %d, stdout %q, stderr %q; want exit 1 mentioning %q before any broker", args, c.mention, code, out, errOut, c.mention)
			}
		}
		if s, _ := c.e.state(t, id); s != "pending" {
			t.Errorf("row is %s, want pending", s)
		}
		var relays int
		if err := c.e.db.SQL.QueryRow(`SELECT count(*) FROM outbox_relays`).Scan(&relays); err != nil || relays != 0 {
			t.Errorf("%d relays registered, %v", relays, err)
		}
	}
	// The operator commands need version 8: a table at 7 is too old for
	// them, one with an unknown version too new.
	testkit.RevertOutboxTo(t, older.db.SQL, older.db.Table(), 7)
	for _, c := range []struct {
		e       *opsEnv
		mention string
	}{{older, "run outbox migrate up"}, {newer, "version 99"}} {
		for _, args := range [][]string{{"status"}, {"dead", "list"}, {"replay", "--since", "1h", "--dry-run"}, {"ui", "--listen", "127.0.0.1:0"}} {
			code, out, errOut := outboxWithin(t, 10*time.Second, append(args, c.e.flags...)...)
			if code != 1 || !strings.Contains(errOut, c.mention) || strings.Contains(out, "serving") {
				t.Errorf("%v at %s: exit %d, stdout %q, stderr %q; want exit 1 mentioning %q", args, c.mention, code, out, errOut, c.mention)
			}
		}
	}
}
