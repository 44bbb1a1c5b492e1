package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestUIServesTheConsole(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	e.write(t, "orders", "o-1", "order.placed")
	e.writeDead(t, "orders", "o-2", "order.placed")
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
	b.wantCleanStop(t)
}

func TestUIUsageErrors(t *testing.T) {
	t.Parallel()
	wantUsageErrors(t, outbox, []usageCase{
		{[]string{"ui", "--listen", "8080"}, "--listen"},
		{[]string{"ui", "--sample-every", "0s"}, "--sample-every must be positive"},
		{[]string{"ui", "--log-level", "loud"}, "--log-level"},
		{[]string{"ui", "--table", "x; drop table y"}, "invalid table name"},
		{[]string{"ui", "extra"}, "unexpected arguments"},
		{[]string{"ui"}, "no database"},
		// Checked before connecting: no --database-url is given.
		{[]string{"ui", "--listen", "127.0.0.1:99999"}, "invalid port"},
		{[]string{"ui", "--listen", "0.0.0.0:8080"}, "--allow-host"},
		{[]string{"ui", "--listen", ":8080", "--allow-host", "outbox.example"}, "--token-file, or --behind-auth-proxy"},
		{[]string{"ui", "--listen", "[::]:8080", "--allow-host", "outbox.example", "--allow-writes"}, "authenticates nobody"},
		{[]string{"ui", "--token-file", "/nonexistent/token"}, "--token-file"},
		// "*" turns the Host check off: on loopback too, a rebound name
		// would reach the console, so it needs authentication as well.
		{[]string{"ui", "--allow-host", "*", "--allow-writes"}, "--token-file, or --behind-auth-proxy"},
		{[]string{"ui", "--allow-host", "outbox.example,*"}, "--token-file, or --behind-auth-proxy"},
	})
}

// With --token-file every request needs the token (HTTP basic auth); an
// explicit --behind-auth-proxy and --allow-host let it listen beyond
// loopback.
func TestUIAuthAndListen(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-s3cret-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startOutbox(t, nil, append([]string{"ui", "--listen", "127.0.0.1:0", "--token-file", tokenFile}, e.flags...)...)
	b.waitOutput(t, "serving the outbox console")
	base := regexp.MustCompile(`http://\S+/`).FindString(b.stdout.String())
	req, _ := http.NewRequest("GET", base, nil)
	if code := statusOf(t, req); code != http.StatusUnauthorized {
		t.Errorf("GET / without the token = %d, want 401", code)
	}
	req.SetBasicAuth("bob", "s3cret-s3cret-s3cret")
	if code := statusOf(t, req); code != http.StatusOK {
		t.Errorf("GET / with the token = %d, want 200", code)
	}
	b.wantCleanStop(t)

	wide := startOutbox(t, nil, append([]string{"ui", "--listen", "0.0.0.0:0", "--allow-host", "outbox.example", "--behind-auth-proxy"}, e.flags...)...)
	wide.waitOutput(t, "serving the outbox console")
	port := regexp.MustCompile(`:(\d+)/`).FindStringSubmatch(wide.stdout.String())[1]
	req, _ = http.NewRequest("GET", "http://127.0.0.1:"+port+"/", nil)
	req.Host = "outbox.example"
	if code := statusOf(t, req); code != http.StatusOK {
		t.Errorf("GET / with an allowed host = %d, want 200", code)
	}
	req, _ = http.NewRequest("GET", "http://127.0.0.1:"+port+"/", nil)
	if code := statusOf(t, req); code != http.StatusMisdirectedRequest {
		t.Errorf("GET / with a host not allowed = %d, want 421", code)
	}
	wide.wantCleanStop(t)
}

// statusOf sends req and returns the status code of the response.
func statusOf(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
