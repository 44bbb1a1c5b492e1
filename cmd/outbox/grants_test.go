package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// roleKit creates login roles for one test, granted what docs/operating.md's
// "Grants" table says, and drops them when the test ends. Roles are
// cluster-wide: their names carry the test's schema, which is unique.
type roleKit struct {
	e *opsEnv
}

// role creates a login role with USAGE on the test's schema and the given
// grants ("SELECT, UPDATE ON outbox"), and returns the flags and a pool
// that connect as it.
func (k roleKit) role(t *testing.T, kind string, grants ...string) ([]string, *sql.DB) {
	t.Helper()
	name := "txo_" + kind + "_" + k.e.db.Schema[len(k.e.db.Schema)-8:]
	admin := k.e.db.SQL
	k.e.exec(t, fmt.Sprintf(`CREATE ROLE %s LOGIN`, name))
	t.Cleanup(func() {
		for _, stmt := range []string{`DROP OWNED BY ` + name + ` CASCADE`, `DROP ROLE ` + name} {
			if _, err := admin.Exec(stmt); err != nil {
				t.Logf("%s: %v", stmt, err)
			}
		}
	})
	k.e.exec(t, fmt.Sprintf(`GRANT USAGE ON SCHEMA %q TO %s`, k.e.db.Schema, name))
	for _, g := range grants {
		k.e.exec(t, fmt.Sprintf(`GRANT %s TO %s`, g, name))
	}
	u, err := url.Parse(k.e.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(name)
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return []string{"--database-url", u.String(), "--schema", k.e.db.Schema}, db
}

// The grants of docs/operating.md, as the tests run them.
var (
	appGrants     = []string{"INSERT ON outbox"}
	relayGrants   = []string{"SELECT, UPDATE, DELETE ON outbox", "SELECT, INSERT, UPDATE, DELETE ON outbox_relays", "SELECT, UPDATE ON outbox_shards, outbox_claim_floor", versionsGrant}
	versionsGrant = "SELECT ON outbox_schema_migrations"
)

// The application's role needs INSERT on the outbox alone: the writer's
// statement (insert and NOTIFY) runs with nothing more.
func TestWriterNeedsOnlyInsert(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	_, db := roleKit{e}.role(t, "app", appGrants...)
	w := testkit.NewWriter(t, e.db.Table())
	ev, err := txoutbox.NewEvent("orders", "order", "o-1", "order.placed", map[string]string{"id": "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, tx, ev); err != nil {
		t.Fatalf("write with INSERT alone: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// And it cannot read or change the outbox.
	if _, err := db.Exec(`SELECT count(*) FROM outbox`); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("the application role can read the outbox: %v", err)
	}
}

// A relay runs with its documented grants, on every engine; without one it
// stops at start-up naming the grant, before claiming anything.
func TestRelayRunsWithItsGrants(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		db := testkit.NewOutboxOn(t, e)
		ev, err := txoutbox.NewEvent("orders", "order", "o-1", "order.placed", map[string]string{"id": "o-1"})
		if err != nil {
			t.Fatal(err)
		}
		testkit.Commit(t, context.Background(), db.SQL, db.Writer(t), ev)
		state := func() string {
			var s string
			if err := db.SQL.QueryRow(db.Q(`SELECT state FROM outbox WHERE event_id = $1`), ev.ID.String()).Scan(&s); err != nil {
				return "gone"
			}
			return s
		}
		flags := func(u testkit.User) []string {
			if e == testkit.Postgres {
				return []string{"--database-url", u.URL, "--schema", db.Schema}
			}
			return []string{"--database-url", u.URL}
		}
		brokers := kafkatest.New(t).ListenAddrs()
		env := map[string]string{"OUTBOX_BROKERS": strings.Join(brokers, ",")}

		// One GRANT a table: MySQL's name one.
		relayTables := []string{relayGrants[0], "SELECT, INSERT, UPDATE, DELETE ON outbox_relays",
			"SELECT, UPDATE ON outbox_shards", "SELECT, UPDATE ON outbox_claim_floor", versionsGrant}
		short := db.NewUser(t, "relay_short", append([]string{relayTables[0], "SELECT, INSERT, UPDATE ON outbox_relays"}, relayTables[2:]...)...)
		code, _, errOut := outboxEnv(t, env, append([]string{"relay"}, flags(short)...)...)
		if code != 1 || !strings.Contains(errOut, "missing grant: the relay needs DELETE on") || !strings.Contains(errOut, "GRANT DELETE ON") {
			t.Fatalf("relay without DELETE on the relays table: exit %d, stderr:\n%s", code, errOut)
		}
		if s := state(); s != "pending" {
			t.Fatalf("row is %s, want pending: nothing may be claimed", s)
		}

		full := db.NewUser(t, "relay", relayTables...)
		b := startOutbox(t, env, append([]string{"relay", "--poll-interval", "50ms", "--retention", "1ms"}, flags(full)...)...)
		waitFor(t, 20*time.Second, "the event published by the relay's user", func() bool { s := state(); return s == "published" || s == "gone" })
		if code := b.stop(t); code != 0 || strings.Contains(b.stderr.String(), "denied") {
			t.Errorf("exit %d; stderr:\n%s", code, b.stderr)
		}
	})
}

// status and dead list need SELECT; retry, drop and replay need UPDATE and
// DELETE on the outbox too, and say so at start-up, on every engine.
func TestOperatorGrants(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, engine testkit.Engine) {
		e := newOpsOn(t, engine)
		id1 := e.writeDead(t, "orders", "o-1", "order.placed")
		id2 := e.writeDead(t, "orders", "o-2", "order.placed")
		flags := func(u testkit.User) []string {
			if e.mysql() {
				return []string{"--database-url", u.URL}
			}
			return []string{"--database-url", u.URL, "--schema", e.db.Schema}
		}
		// One GRANT a table: MySQL's name one.
		reader := flags(e.db.NewUser(t, "reader", "SELECT ON outbox", "SELECT ON outbox_relays", "SELECT ON outbox_shards", versionsGrant))
		for _, args := range [][]string{{"status"}, {"dead", "list"}, {"dead", "show", fmt.Sprint(id1)}} {
			if code, _, errOut := outboxEnv(t, nil, append(args, reader...)...); code != 0 {
				t.Errorf("read-only %v: exit %d, stderr %q", args, code, errOut)
			}
		}
		for _, args := range [][]string{{"dead", "retry", fmt.Sprint(id1)}, {"dead", "drop", fmt.Sprint(id1), "--yes"}, {"replay", "--since", "1h"}} {
			code, _, errOut := outboxEnv(t, nil, append(args, reader...)...)
			if code != 1 || !strings.Contains(errOut, "needs UPDATE, DELETE on") || !strings.Contains(errOut, "GRANT UPDATE, DELETE ON") {
				t.Errorf("%v as the read-only user: exit %d, stderr %q", args, code, errOut)
			}
		}
		if s, _ := e.state(t, id1); s != "dead" {
			t.Errorf("row %d is %s, want dead", id1, s)
		}

		// Without UPDATE on the claim floor, which retry and replay lower:
		// refused before anything changes.
		noFloor := flags(e.db.NewUser(t, "nofloor", "SELECT, UPDATE, DELETE ON outbox", "SELECT ON outbox_relays", "SELECT ON outbox_shards", "SELECT ON outbox_claim_floor", versionsGrant))
		code, _, errOut := outboxEnv(t, nil, append([]string{"dead", "retry", fmt.Sprint(id1)}, noFloor...)...)
		if code != 1 || !strings.Contains(errOut, "needs UPDATE on") || !strings.Contains(errOut, "outbox_claim_floor") {
			t.Errorf("retry without UPDATE on the claim floor: exit %d, stderr %q", code, errOut)
		}
		if s, _ := e.state(t, id1); s != "dead" {
			t.Errorf("row %d is %s, want dead", id1, s)
		}

		operator := flags(e.db.NewUser(t, "operator", "SELECT, UPDATE, DELETE ON outbox", "SELECT ON outbox_relays", "SELECT ON outbox_shards", "SELECT, UPDATE ON outbox_claim_floor", versionsGrant))
		for _, args := range [][]string{{"dead", "retry", fmt.Sprint(id1)}, {"dead", "drop", fmt.Sprint(id2), "--yes"}, {"replay", "--since", "1h"}} {
			if code, _, errOut := outboxEnv(t, nil, append(args, operator...)...); code != 0 {
				t.Errorf("operator %v: exit %d, stderr %q", args, code, errOut)
			}
		}
		if s, _ := e.state(t, id1); s != "pending" {
			t.Errorf("row %d is %s after retry, want pending", id1, s)
		}
		if s, _ := e.state(t, id2); s != "gone" {
			t.Errorf("row %d is %s after drop, want gone", id2, s)
		}
	})
}

// The migrator needs CREATE on the schema its search_path names; the tables
// it creates are its own. (With --schema it also creates the schema if
// missing, which needs CREATE on the database.)
func TestMigratorGrants(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	e := &opsEnv{db: db}
	flags, _ := roleKit{e}.role(t, "migrator")
	flags = flags[:2] // the URL's search_path, no --schema
	code, _, errOut := outboxEnv(t, nil, append([]string{"migrate", "up"}, flags...)...)
	if code != 1 || !strings.Contains(errOut, "permission denied for schema") {
		t.Errorf("migrate up without CREATE: exit %d, stderr %q", code, errOut)
	}
	e.exec(t, fmt.Sprintf(`GRANT CREATE ON SCHEMA %q TO %s`, db.Schema, "txo_migrator_"+db.Schema[len(db.Schema)-8:]))
	if code, out, errOut := outboxEnv(t, nil, append([]string{"migrate", "up"}, flags...)...); code != 0 {
		t.Fatalf("migrate up with CREATE on the schema: exit %d %q %q", code, out, errOut)
	}
	if code, _, errOut := outboxEnv(t, nil, append([]string{"migrate", "down"}, flags...)...); code != 0 {
		t.Errorf("migrate down by the owner: exit %d %q", code, errOut)
	}
}
