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
// VACUUM FULL does, in a transaction on db rolled back by release or when
// the test ends, and returns its backend's pid.
func lockTables(t *testing.T, db *sql.DB, tables ...string) (pid int, release func()) {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	release = func() { _ = tx.Rollback() }
	t.Cleanup(release)
	if _, err := tx.Exec(`LOCK TABLE ` + strings.Join(tables, ", ") + ` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid, release
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
	pid, _ := lockTables(t, e.db.SQL, "outbox")

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
	pid, _ := lockTables(t, e.base.SQL, e.prefix+"_b.outbox", e.prefix+"_b.outbox_relays")

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

// relay --schemas beside a tenant another session holds locked: /readyz
// lists the table as locked and stays ready (the other tenant is served;
// the lock is not the relay's to end), the log names it once, the metrics
// count it, and once the lock is gone the tenant's events go out.
func TestRelaySchemasStaysReadyBesideALockedTenant(t *testing.T) {
	t.Parallel()
	e := newTenants(t, "a", "b")
	b := startOutbox(t, nil, append([]string{"relay", "--dev-broker", "--metrics-addr", "127.0.0.1:0",
		"--poll-interval", "50ms", "--heartbeat", "100ms", "--stale-after", "1s", "--lease", "2s"}, e.flags()...)...)
	b.waitOutput(t, "serving /metrics")
	base := "http://" + servingAddr.FindStringSubmatch(b.stderr.String())[1]
	locked := e.prefix + "_b.outbox"
	type table struct {
		Table        string `json:"table"`
		Heartbeating bool   `json:"heartbeating"`
		Locked       bool   `json:"locked"`
	}
	ready := func() (int, map[string]table) {
		code, body := get(t, base+"/readyz")
		var r struct {
			Tables []table `json:"tables"`
		}
		_ = json.Unmarshal([]byte(body), &r)
		tables := map[string]table{}
		for _, tb := range r.Tables {
			tables[tb.Table] = tb
		}
		return code, tables
	}
	waitFor(t, 20*time.Second, "both tenants served", func() bool { code, tables := ready(); return code == 200 && len(tables) == 2 })

	_, release := lockTables(t, e.base.SQL, locked, e.prefix+"_b.outbox_relays", e.prefix+"_b.outbox_shards", e.prefix+"_b.outbox_claim_floor")
	e.write(t, "a")
	waitFor(t, 20*time.Second, "the unlocked tenant published, the locked one reported", func() bool {
		_, tables := ready()
		return e.published(t, "a") == 1 && tables[locked].Locked
	})
	// Past --stale-after the locked table's relay no longer heartbeats; the
	// relay stays ready.
	waitFor(t, 10*time.Second, "the locked table's relay no longer heartbeating", func() bool {
		_, tables := ready()
		return !tables[locked].Heartbeating
	})
	code, tables := ready()
	if code != 200 || !tables[locked].Locked || !tables[e.prefix+"_a.outbox"].Heartbeating {
		t.Errorf("/readyz with a locked tenant past --stale-after: %d %+v, want 200, %s locked and the other heartbeating", code, tables, locked)
	}
	_, metrics := get(t, base+"/metrics")
	if !strings.Contains(metrics, `txoutbox_relay_lock_timeouts_total{`) || !strings.Contains(metrics, `txoutbox_relay_locked_duration_seconds{`) {
		t.Errorf("no lockout metrics:\n%s", metrics)
	}
	if n := strings.Count(b.stderr.String(), "gave up on a lock another session holds"); n != 1 {
		t.Errorf("the lockout logged %d times, want once:\n%s", n, b.stderr)
	}

	release()
	e.write(t, "b")
	waitFor(t, 20*time.Second, "the tenant published once the lock went, and ready again", func() bool {
		_, tables := ready()
		return e.published(t, "b") == 1 && !tables[locked].Locked && tables[locked].Heartbeating
	})
	b.wantCleanStop(t)
}
