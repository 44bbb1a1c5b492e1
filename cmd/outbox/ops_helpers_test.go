package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// opsEnv is an outbox to run the operator commands against.
type opsEnv struct {
	db     *testkit.DB
	flags  []string
	writer *txoutbox.Writer
}

// newOps is newOpsOn PostgreSQL.
func newOps(t *testing.T) *opsEnv {
	t.Helper()
	return newOpsOn(t, testkit.Postgres)
}

// newOpsOn is an outbox of the test's own on engine e: on PostgreSQL the
// commands name its schema, on MySQL its database, in a mysql:// URL.
func newOpsOn(t *testing.T, e testkit.Engine) *opsEnv {
	t.Helper()
	db := testkit.NewOutboxOn(t, e)
	flags := []string{"--database-url", db.URL}
	if e.Dialect != txoutbox.MySQL {
		flags = append(flags, "--schema", db.Schema)
	}
	return &opsEnv{db: db, flags: flags, writer: db.Writer(t)}
}

func (e *opsEnv) mysql() bool { return e.db.Dialect() == txoutbox.MySQL }

// write commits one event and returns its row id and event id.
func (e *opsEnv) write(t *testing.T, topic, aggregate, eventType string) (int64, string) {
	t.Helper()
	ctx := context.Background()
	ev, err := txoutbox.NewEvent(topic, "order", aggregate, eventType, map[string]string{"aggregate": aggregate})
	if err != nil {
		t.Fatal(err)
	}
	ev.Headers = map[string]string{"tenant": "acme"}
	testkit.Commit(t, ctx, e.db.SQL, e.writer, ev)
	var id int64
	if err := e.db.SQL.QueryRow(e.db.Q(`SELECT id FROM outbox WHERE event_id = $1`), ev.ID.String()).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id, ev.ID.String()
}

// writeDead commits one event and makes it dead (see kill); it returns the
// row id.
func (e *opsEnv) writeDead(t *testing.T, topic, aggregate, eventType string) int64 {
	t.Helper()
	id, _ := e.write(t, topic, aggregate, eventType)
	e.kill(t, id)
	return id
}

// kill makes rows dead as the relay does after MaxAttempts, its backoff
// kept (next_attempt_at on PostgreSQL, retry_at on MySQL).
func (e *opsEnv) kill(t *testing.T, ids ...int64) {
	t.Helper()
	backoff := `next_attempt_at = $1`
	if e.mysql() {
		backoff = `retry_at = $1`
	}
	for _, id := range ids {
		e.exec(t, `UPDATE outbox SET state = 'dead', attempts = 10, last_error = 'publish: broker said no', `+backoff+` WHERE id = $2`,
			time.Now().UTC().Add(5*time.Minute), id)
	}
}

// exec runs a statement, its $n placeholders ? on MySQL: args bind them
// in the order they appear.
func (e *opsEnv) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := e.db.SQL.Exec(e.db.Q(query), args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// state returns a row's state and attempts ("gone" if deleted).
func (e *opsEnv) state(t *testing.T, id int64) (string, int) {
	t.Helper()
	var (
		state    string
		attempts int
	)
	err := e.db.SQL.QueryRow(e.db.Q(`SELECT state, attempts FROM outbox WHERE id = $1`), id).Scan(&state, &attempts)
	if err != nil {
		return "gone", 0
	}
	return state, attempts
}

// run runs the CLI with the outbox's connection flags appended.
func (e *opsEnv) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return outbox(t, append(args, e.flags...)...)
}

// runJSON runs with --json and decodes stdout, failing on a non-zero exit.
func (e *opsEnv) runJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	code, out, errOut := e.run(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("outbox %v: exit %d, stderr %q", args, code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("outbox %v: %v in %q", args, err, out)
	}
}
