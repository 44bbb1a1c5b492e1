package main

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

func TestUIServesTheConsole(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	e.write(t, "orders", "o-1", "order.placed")
	dead, _ := e.write(t, "orders", "o-2", "order.placed")
	e.kill(t, dead)
	// --allow-writes is read from the command line only: a variable left in
	// the environment does not open the console to writes.
	b := startOutbox(t, map[string]string{"OUTBOX_ALLOW_WRITES": "true"}, append([]string{"ui", "--listen", "127.0.0.1:0"}, e.flags...)...)
	b.waitOutput(t, "serving the outbox console (read-only) on http://")
	base := regexp.MustCompile(`http://\S+/`).FindString(b.stdout.String())
	resp, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "read-only") || strings.Contains(string(page), e.db.URL) {
		t.Fatalf("GET / = %d:\n%s", resp.StatusCode, page)
	}
	resp, err = http.Get(base + "api/overview")
	if err != nil {
		t.Fatal(err)
	}
	var ov struct{ Backlog, Dead int64 }
	err = json.NewDecoder(resp.Body).Decode(&ov)
	resp.Body.Close()
	if err != nil || ov.Backlog != 1 || ov.Dead != 1 {
		t.Errorf("api/overview = %+v, %v; want backlog 1, dead 1", ov, err)
	}
	if code := b.stop(t); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0; stderr:\n%s", code, b.stderr)
	}
}

func TestUIUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"ui", "--listen", "8080"}, "--listen"},
		{[]string{"ui", "--sample-every", "0s"}, "--sample-every must be positive"},
		{[]string{"ui", "--log-level", "loud"}, "--log-level"},
		{[]string{"ui", "--table", "x; drop table y"}, "invalid table name"},
		{[]string{"ui", "extra"}, "unexpected arguments"},
		{[]string{"ui"}, "no database"},
	} {
		code, _, errOut := outbox(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.msg) {
			t.Errorf("outbox %v = exit %d, stderr %q; want exit 2 mentioning %q", tc.args, code, errOut, tc.msg)
		}
	}
}
