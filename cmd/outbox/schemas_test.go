package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// tenants is a database of schemas prefix_<name>, for --schemas.
type tenants struct {
	base    *testkit.DB
	prefix  string
	schemas map[string]*testkit.Schema
}

// newTenants starts with the tenants named, their outboxes migrated.
func newTenants(t *testing.T, migrated ...string) *tenants {
	t.Helper()
	e := &tenants{base: testkit.NewDB(t), prefix: testkit.SchemaName("tn"), schemas: map[string]*testkit.Schema{}}
	for _, name := range migrated {
		e.add(t, name, true)
	}
	return e
}

// add creates schema prefix_name, with the outbox migrated or empty,
// dropped when the test ends.
func (e *tenants) add(t *testing.T, name string, migrate bool) *testkit.Schema {
	t.Helper()
	s := testkit.NewSchema(t, e.base.URL, e.prefix+"_"+name, migrate)
	e.schemas[name] = s
	return s
}

// flags select every tenant schema.
func (e *tenants) flags() []string {
	return []string{"--database-url", e.base.URL, "--schemas", e.prefix + "_*"}
}

// write commits one event to tenant name's outbox.
func (e *tenants) write(t *testing.T, name string) {
	t.Helper()
	s := e.schemas[name]
	ev, err := txoutbox.NewEvent("orders", "order", "o-1", "order.placed", map[string]string{"tenant": name})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Commit(t, context.Background(), s.SQL, testkit.NewWriter(t, s.Table()), ev)
}

func (e *tenants) published(t *testing.T, name string) int {
	t.Helper()
	var n int
	if err := e.schemas[name].SQL.QueryRow(`SELECT count(*) FROM outbox WHERE state = 'published'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSchemasUsageErrors(t *testing.T) {
	t.Parallel()
	wantUsageErrors(t, outbox, []usageCase{
		{[]string{"relay", "--schemas", "tenant_*", "--schema", "public"}, "--schemas and --schema"},
		{[]string{"relay", "--schemas", "tenant_*", "--mode", "wal"}, "WAL mode serves one table"},
		{[]string{"relay", "--schemas", "tenant_["}, "SchemaPattern"},
		{[]string{"relay", "--schemas", "tenant_*", "--max-conns", "-1"}, "--max-conns is negative"},
		{[]string{"relay", "--schemas", "tenant_*", "--max-conns", "1"}, "needs at least 4 connections"},
		{[]string{"relay", "--max-conns", "3"}, "needs at least 4 connections"},
		{[]string{"relay", "--max-conns", "2", "--no-listen"}, "needs at least 3 connections"},
		{[]string{"relay", "--schemas", "tenant_*", "--claim-conns", "-1"}, "--claim-conns is negative"},
		{[]string{"relay", "--claim-conns", "2"}, "--claim-conns is for a relay of many tables"},
		{[]string{"relay", "--schemas", "tenant_*", "--max-conns", "8", "--claim-conns", "6"}, "at most 5"},
		{[]string{"relay", "--schemas", "tenant_*", "--max-conns", "8", "--claim-conns", "7", "--no-listen"}, "at most 6"},
		{[]string{"status", "--schemas", "tenant_*,other"}, "not both"},
		{[]string{"status", "--schemas", strings.Repeat("a", 64)}, "invalid table name"},
		{[]string{"status", "--schemas", "tenant_*", "--slot", "s"}, "--slot"},
		{[]string{"migrate", "down", "--schemas", "tenant_*"}, "only migrate up"},
		{[]string{"migrate", "status", "--schemas", "tenant_*"}, "only migrate up"},
		{[]string{"ui", "--schemas", "tenant_*", "--schema", "public"}, "--schemas and --schema"},
		{[]string{"ui", "--schemas", "tenant_*", "--slot", "s"}, "--slot"},
		{[]string{"ui", "--schemas", "tenant_*,other"}, "not both"},
		{[]string{"ui", "--schemas", "tenant_["}, "SchemaPattern"},
		{[]string{"ui", "--schemas", strings.Repeat("a", 64)}, "invalid table name"},
		{[]string{"ui", "--schemas", "tenant_*", "--discover-interval", "-1s"}, "--discover-interval -1s is below its floor 100ms"},
		// The flags of one table's console are checked as without --schemas.
		{[]string{"ui", "--schemas", "tenant_*", "--listen", "0.0.0.0:8080"}, "--allow-host"},
	})
	for _, cmd := range []string{"status", "ui"} {
		code, _, errOut := outboxEnv(t, map[string]string{"OUTBOX_SCHEMA": "public"}, cmd, "--schemas", "tenant_*")
		if code != exitUsage || !strings.Contains(errOut, "OUTBOX_SCHEMA") {
			t.Errorf("%s: OUTBOX_SCHEMA with --schemas: exit %d, stderr %q", cmd, code, errOut)
		}
	}
}

// migrate up --schemas migrates every matching schema, idempotently, one
// line per table; one that fails does not stop the others, and fails the
// command.
func TestMigrateUpSchemas(t *testing.T) {
	t.Parallel()
	e := newTenants(t)
	e.add(t, "a", false)
	e.add(t, "b", false)
	bad := e.add(t, "c", false)
	if _, err := bad.SQL.Exec(`CREATE VIEW outbox AS SELECT 1 AS id`); err != nil { // in the way of the table
		t.Fatal(err)
	}
	code, out, errOut := outbox(t, append([]string{"migrate", "up"}, e.flags()...)...)
	if code != 1 || !strings.Contains(errOut, "1 of 3 tables failed") {
		t.Errorf("exit %d, stderr %q; want 1 and the failure counted", code, errOut)
	}
	for _, want := range []string{e.prefix + "_a.outbox: applied version(s) 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12\n",
		e.prefix + "_b.outbox: applied version(s) 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12\n", e.prefix + "_c.outbox: failed: "} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if _, err := bad.SQL.Exec(`DROP VIEW outbox`); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = outbox(t, append([]string{"migrate", "up", "--json"}, e.flags()...)...)
	var got struct {
		Tables []struct {
			Table   string `json:"table"`
			Applied []int  `json:"applied"`
			Error   string `json:"error"`
		} `json:"tables"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got.Tables) != 3 {
		t.Fatalf("second migrate up --json: exit %d, %q, stderr %q", code, out, errOut)
	}
	for _, tb := range got.Tables {
		wantApplied := 0
		if tb.Table == e.prefix+"_c.outbox" {
			wantApplied = 12
		}
		if len(tb.Applied) != wantApplied || tb.Error != "" {
			t.Errorf("%s: applied %v, error %q; want %d versions", tb.Table, tb.Applied, tb.Error, wantApplied)
		}
	}
	code, _, errOut = outbox(t, "migrate", "up", "--database-url", e.base.URL, "--schemas", e.prefix+"_nothing_*")
	if code != 1 || !strings.Contains(errOut, "selects no schema") {
		t.Errorf("a pattern matching nothing: exit %d, stderr %q", code, errOut)
	}
}

// status --schemas shows one row per table; a schema the pattern selects
// without an outbox table shows it in its row and fails nothing, one a
// list names fails the command after the others are shown.
func TestStatusSchemas(t *testing.T) {
	t.Parallel()
	e := newTenants(t, "a", "b")
	e.write(t, "b")
	e.write(t, "b")
	code, out, errOut := outbox(t, append([]string{"status"}, e.flags()...)...)
	if code != 0 || !strings.Contains(out, "TABLE") {
		t.Fatalf("status: exit %d, %q, stderr %q", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], e.prefix+"_a.outbox ") || !strings.HasPrefix(lines[2], e.prefix+"_b.outbox ") ||
		strings.Fields(lines[1])[1] != "0" || strings.Fields(lines[2])[1] != "2" {
		t.Errorf("status rows:\n%s", out)
	}
	code, out, _ = outbox(t, append([]string{"status", "--json", "--max-lag", "1ms"}, e.flags()...)...)
	var got struct {
		Tables []struct {
			Table   string `json:"table"`
			Backlog int64  `json:"backlog"`
		} `json:"tables"`
		Exceeded bool `json:"max_lag_exceeded"`
	}
	if code != exitLagExceeded || json.Unmarshal([]byte(out), &got) != nil || len(got.Tables) != 2 || got.Tables[1].Backlog != 2 || !got.Exceeded {
		t.Errorf("status --json --max-lag 1ms: exit %d, %q", code, out)
	}
	e.add(t, "c", false)
	code, out, errOut = outbox(t, append([]string{"status"}, e.flags()...)...)
	if code != 0 || !strings.Contains(out, e.prefix+"_c.outbox") || !strings.Contains(out, "no outbox table") {
		t.Errorf("status with an empty schema a pattern selects: exit %d, %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = outbox(t, "status", "--database-url", e.base.URL, "--schemas", e.prefix+"_a,"+e.prefix+"_c")
	if code != 1 || !strings.Contains(out, e.prefix+"_c.outbox") || !strings.Contains(out, "no outbox table") || !strings.Contains(errOut, "1 of 2 tables") {
		t.Errorf("status with an empty schema a list names: exit %d, %q, stderr %q", code, out, errOut)
	}
}

// An exceeded lag exits 3 whatever else status --schemas finds: a new
// tenant not migrated yet (a pattern's: shown, failing nothing), or a
// schema a list names that has no outbox table (a failure, exit 1 without
// the lag) must not hide a late table from the alert.
func TestStatusSchemasLagExceededWinsOverTablesNotRead(t *testing.T) {
	t.Parallel()
	e := newTenants(t, "a")
	e.write(t, "a")
	e.add(t, "new", false)
	code, out, errOut := outbox(t, append([]string{"status", "--max-lag", "1ms", "--json"}, e.flags()...)...)
	var got struct {
		Tables []struct {
			Table   string `json:"table"`
			Skipped string `json:"skipped"`
			Error   string `json:"error"`
		} `json:"tables"`
		Exceeded bool `json:"max_lag_exceeded"`
	}
	if code != exitLagExceeded || json.Unmarshal([]byte(out), &got) != nil || !got.Exceeded || len(got.Tables) != 2 ||
		got.Tables[1].Skipped != "no outbox table" || got.Tables[1].Error != "" {
		t.Errorf("pattern with an unmigrated tenant, lag exceeded: exit %d, want %d; %s, stderr %q", code, exitLagExceeded, out, errOut)
	}
	code, out, errOut = outbox(t, "status", "--max-lag", "1ms", "--database-url", e.base.URL, "--schemas", e.prefix+"_a,"+e.prefix+"_new")
	if code != exitLagExceeded || !strings.Contains(errOut, "exceeds --max-lag") || !strings.Contains(errOut, "1 of 2 tables could not be read") {
		t.Errorf("list with a schema without a table, lag exceeded: exit %d, want %d; %s, stderr %q", code, exitLagExceeded, out, errOut)
	}
}

// relay --schemas with a pattern selecting no schema fails at start (a
// typo), as status and migrate up do; one selecting only schemas without
// a migrated outbox table (tenants to come) runs, not ready until it
// serves a table.
func TestRelaySchemasFailsAtStartForAPatternSelectingNothing(t *testing.T) {
	t.Parallel()
	e := newTenants(t, "a")
	code, _, errOut := outbox(t, "relay", "--dev-broker", "--database-url", e.base.URL, "--schemas", e.prefix+"_typo_*")
	if code != 1 || !strings.Contains(errOut, "selects no schema") {
		t.Errorf("a pattern matching nothing: exit %d, stderr %q; want 1 and the reason", code, errOut)
	}

	e.add(t, "later", false)
	b := startOutbox(t, nil, "relay", "--dev-broker", "--metrics-addr", "127.0.0.1:0", "--discover-interval", "200ms",
		"--database-url", e.base.URL, "--schemas", e.prefix+"_lat*")
	b.waitOutput(t, "serving /metrics")
	if !strings.Contains(b.stderr.String(), "no selected schema has a migrated outbox table yet") {
		t.Errorf("no warning that nothing is served:\n%s", b.stderr.String())
	}
	base := "http://" + servingAddr.FindStringSubmatch(b.stderr.String())[1]
	b.waitOutput(t, "not serving a selected schema's table") // a discovery found the tenant without a table
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz serving no table: %d %s, want 503", code, body)
	}
	code, out, errOut := outbox(t, "migrate", "up", "--database-url", e.base.URL, "--schemas", e.prefix+"_later")
	if code != 0 {
		t.Fatalf("migrate up: exit %d, %s, stderr %q", code, out, errOut)
	}
	waitFor(t, 10*time.Second, "/readyz ready once the tenant is migrated", func() bool {
		code, _ := get(t, base+"/readyz")
		return code == http.StatusOK
	})
	b.wantCleanStop(t)
}

// relay --schemas publishes every tenant's outbox, finds a new tenant's
// while running, reports each table in /readyz and its metrics by
// txoutbox_table, and stops cleanly.
func TestRelaySchemas(t *testing.T) {
	t.Parallel()
	e := newTenants(t, "a", "b")
	e.write(t, "a")
	e.write(t, "b")
	b := startOutbox(t, nil, append([]string{"relay", "--dev-broker", "--discover-interval", "200ms", "--metrics-addr", "127.0.0.1:0",
		"--poll-interval", "50ms", "--heartbeat", "100ms", "--stale-after", "1s", "--lease", "2s", "--claim-conns", "2"}, e.flags()...)...)
	b.waitOutput(t, "serving /metrics")
	b.waitOutput(t, "claim_conns=2")
	base := "http://" + servingAddr.FindStringSubmatch(b.stderr.String())[1]
	waitFor(t, 20*time.Second, "both tenants published", func() bool { return e.published(t, "a") == 1 && e.published(t, "b") == 1 })
	e.add(t, "c", true)
	e.write(t, "c")
	waitFor(t, 20*time.Second, "the new tenant published", func() bool { return e.published(t, "c") == 1 })
	waitFor(t, 10*time.Second, "/readyz to list three ready tables", func() bool {
		code, body := get(t, base+"/readyz")
		var ready struct {
			Tables []map[string]any `json:"tables"`
		}
		return code == http.StatusOK && json.Unmarshal([]byte(body), &ready) == nil && len(ready.Tables) == 3
	})
	var metrics string
	if !testkit.Eventually(10*time.Second, func() bool {
		_, body := get(t, base+"/metrics")
		metrics = body
		for _, n := range []string{"a", "b", "c"} {
			if !strings.Contains(body, `txoutbox_table="`+e.prefix+"_"+n+`.outbox"`) {
				return false
			}
		}
		return true
	}) {
		t.Errorf("no metrics for each table:\n%s", metrics)
	}
	b.wantCleanStop(t)
}
