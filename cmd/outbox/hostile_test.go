package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

// outputMax bounds what a command may print for the hostile rows: the
// largest is dead show --full of 100 KB text columns.
const outputMax = 2 << 20

// Every dead command works on every kind of malformed dead row
// (testkit.HostileRows): exit 0, no control or bidirectional character
// reaches the terminal, output bounded, and retry and drop change the row.
func TestDeadCommandsOnHostileRows(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	ids := testkit.SeedHostile(t, e.db)
	check := func(args []string, code int, out, errOut string) {
		t.Helper()
		if code != 0 {
			t.Errorf("outbox %.200v: exit %d, stderr %.500q", args, code, errOut)
		}
		for name, s := range map[string]string{"stdout": out, "stderr": errOut} {
			if i, near := testkit.Unsafe(s); i >= 0 {
				t.Errorf("outbox %.200v: %s has an unescaped control or bidi character at %d: %q", args, name, i, near)
			}
		}
		if len(out) > outputMax {
			t.Errorf("outbox %.200v: %d bytes of output, over %d", args, len(out), outputMax)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		code, out, errOut := e.run(t, args...)
		check(args, code, out, errOut)
		return out
	}
	for _, args := range [][]string{{"dead", "list"}, {"dead", "list", "--json"}, {"dead", "list", "--topic", "hostile"},
		{"status"}, {"status", "--json"}, {"dead", "retry", "--all", "--dry-run"}, {"dead", "drop", "--all", "--dry-run"},
		{"dead", "retry", "--all", "--dry-run", "--json"}} {
		out := run(args...)
		if args[len(args)-1] == "--json" && !json.Valid([]byte(out)) {
			t.Errorf("outbox %v: not JSON: %.300s", args, out)
		}
	}
	for _, r := range testkit.HostileRows() {
		id := fmt.Sprint(ids[r.Kind])
		show := run("dead", "show", id)
		switch {
		case (r.Kind == "payload-deep" || r.Kind == "payload-large") && !strings.Contains(show, "(payload cut: "):
			t.Errorf("%s: dead show does not say the payload was cut:\n%.300s", r.Kind, show)
		case r.Kind == "text-huge" && !strings.Contains(show, "--full shows them whole"):
			t.Errorf("%s: dead show does not say values were cut", r.Kind)
		case r.Kind == "headers-nested" && !strings.Contains(show, "not a JSON object of strings"):
			t.Errorf("%s: dead show does not say the headers are malformed:\n%s", r.Kind, show)
		case strings.Contains(show, "next attempt"):
			t.Errorf("%s: dead show prints a next attempt for a dead event", r.Kind)
		}
		full := run("dead", "show", id, "--full")
		if r.Kind == "payload-deep" && !strings.Contains(full, "compact: indented it would pass") {
			t.Errorf("%s: dead show --full does not print the deep payload compact:\n%.300s", r.Kind, full)
		}
		if r.Kind == "text-huge" && !strings.Contains(full, "E"+strings.Repeat("x", 100_000)) {
			t.Errorf("%s: dead show --full does not print the whole last error", r.Kind)
		}
		var row rowOutput
		if err := json.Unmarshal([]byte(run("dead", "show", id, "--json")), &row); err != nil || row.ID != ids[r.Kind] {
			t.Errorf("%s: dead show --json = %+v, %v", r.Kind, row, err)
		}
		if strings.HasPrefix(r.Kind, "headers-") && r.Kind != "headers-escapes" && r.Kind != "headers-null" &&
			(row.HeadersError == "" || len(row.HeadersRaw) == 0) {
			t.Errorf("%s: dead show --json lacks headers_raw and headers_error: %+v", r.Kind, row)
		}
		if r.Kind == "text-escapes" && row.LastError != "err"+testkit.EscClear+testkit.EscOverLn+testkit.EscLink+testkit.EscTitle+testkit.BidiRTLO {
			t.Errorf("%s: --json changed the last error: %q", r.Kind, row.LastError)
		}
		run("dead", "drop", id, "--dry-run")
		run("dead", "retry", id)
		if s, _ := e.state(t, ids[r.Kind]); s != "pending" {
			t.Errorf("%s: retried row is %s", r.Kind, s)
		}
		e.exec(t, `UPDATE outbox SET state = 'dead' WHERE id = $1`, ids[r.Kind])
		run("dead", "drop", id, "--yes")
		if s, _ := e.state(t, ids[r.Kind]); s != "gone" {
			t.Errorf("%s: dropped row is %s", r.Kind, s)
		}
	}
}

// Input the database cannot hold is bad usage (2), refused before any
// statement; an event that is not dead or does not exist is a failure (1).
func TestDeadExitCodes(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	pending, _ := e.write(t, "orders", "o-1", "order.placed")
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"dead", "list", "--topic", "a\xffb"}, exitUsage, `--topic a\xffb is not UTF-8`},
		{[]string{"dead", "retry", "--aggregate", "a\x00b"}, exitUsage, "contains a NUL"},
		{[]string{"replay", "--since", "1h", "--topic", "\xff"}, exitUsage, "not UTF-8"},
		{[]string{"dead", "show", "999999"}, 1, "no such event: 999999"},
		{[]string{"dead", "retry", fmt.Sprint(pending)}, 1, "not dead"},
		{[]string{"dead", "drop", fmt.Sprint(pending), "--yes"}, 1, "not dead"},
	} {
		code, _, errOut := e.run(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("outbox %q: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, errOut, tc.code, tc.msg)
		}
	}
}
