package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

// lockTables holds tables locked ACCESS EXCLUSIVE, as an ALTER TABLE or a
// VACUUM FULL does, in a transaction on db rolled back when the test
// ends, and returns its backend's pid.
func lockTables(t *testing.T, db *sql.DB, tables ...string) int {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	if _, err := tx.Exec(`LOCK TABLE ` + strings.Join(tables, ", ") + ` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := tx.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

// statusWithin runs outbox status with args and wants it to end within
// limit: a status that waits for a lock would hang as long as it lasts.
func statusWithin(t *testing.T, limit time.Duration, args ...string) (int, string, string) {
	t.Helper()
	b := startOutbox(t, nil, append([]string{"status"}, args...)...)
	select {
	case code := <-b.done:
		b.done <- code
		return code, b.stdout.String(), b.stderr.String()
	case <-time.After(limit):
		t.Fatalf("outbox status %v still running after %s: it waits for the table's lock", args, limit)
		return 0, "", ""
	}
}

// status on a table another session holds locked answers within
// --lock-timeout, showing who holds the lock, and fails (exit 1): the
// relays publish nothing from it meanwhile.
func TestStatusShowsWhoLocksTheTable(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	e.write(t, "orders", "o-1", "order.placed")
	pid := lockTables(t, e.db.SQL, "outbox")

	code, out, errOut := statusWithin(t, 15*time.Second, e.flags...)
	flat := strings.Join(strings.Fields(out), " ")
	if code != 1 || !strings.Contains(errOut, "is locked by another session") ||
		!strings.Contains(flat, strconv.Itoa(pid)+" "+e.db.Schema+".outbox AccessExclusiveLock held") {
		t.Errorf("status of a locked table: exit %d, stdout %q, stderr %q; want exit 1 and the lock of pid %d", code, out, errOut, pid)
	}

	code, out, errOut = statusWithin(t, 15*time.Second, append([]string{"--json", "--lock-timeout", "200ms"}, e.flags...)...)
	var got struct {
		Locked bool `json:"locked"`
		Locks  []struct {
			PID      int    `json:"pid"`
			Relation string `json:"relation"`
			Mode     string `json:"mode"`
			Granted  bool   `json:"granted"`
		} `json:"locks"`
	}
	if code != 1 || json.Unmarshal([]byte(out), &got) != nil || !got.Locked || len(got.Locks) != 1 || got.Locks[0].PID != pid ||
		got.Locks[0].Mode != "AccessExclusiveLock" || !got.Locks[0].Granted || got.Locks[0].Relation != e.db.Schema+".outbox" {
		t.Errorf("status --json of a locked table: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// status --schemas shows a locked tenant's lock in its row, the others'
// figures beside it, and fails (exit 1) once all are shown.
func TestStatusSchemasShowsALockedTenant(t *testing.T) {
	t.Parallel()
	e := newTenants(t, "a", "b")
	e.write(t, "a")
	pid := lockTables(t, e.base.SQL, e.prefix+"_b.outbox", e.prefix+"_b.outbox_relays")

	code, out, errOut := statusWithin(t, 15*time.Second, e.flags()...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 1 || len(lines) != 3 || !strings.HasPrefix(lines[1], e.prefix+"_a.outbox ") || strings.Fields(lines[1])[1] != "1" ||
		!strings.HasPrefix(lines[2], e.prefix+"_b.outbox ") || !strings.Contains(lines[2], "locked by another session") ||
		!strings.Contains(lines[2], "pid "+strconv.Itoa(pid)+" holds AccessExclusiveLock") || !strings.Contains(errOut, "1 of 2 tables") {
		t.Errorf("status --schemas with a locked tenant: exit %d, stdout:\n%s\nstderr %q", code, out, errOut)
	}

	code, out, _ = statusWithin(t, 15*time.Second, append([]string{"--json"}, e.flags()...)...)
	var got struct {
		Tables []struct {
			Table   string `json:"table"`
			Backlog int64  `json:"backlog"`
			Error   string `json:"error"`
			Locks   []struct {
				PID int `json:"pid"`
			} `json:"locks"`
		} `json:"tables"`
	}
	if code != 1 || json.Unmarshal([]byte(out), &got) != nil || len(got.Tables) != 2 || got.Tables[0].Backlog != 1 || len(got.Tables[0].Locks) != 0 ||
		len(got.Tables[1].Locks) != 2 || got.Tables[1].Locks[0].PID != pid || !strings.Contains(got.Tables[1].Error, "locked by another session") {
		t.Errorf("status --schemas --json with a locked tenant: exit %d, %s", code, out)
	}
}
