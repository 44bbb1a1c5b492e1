package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

// ui serves the console's pages, read-only unless --allow-writes, and
// with it retries through a form; on MySQL the overview says the
// per-topic figures are not read there.
func TestUIServesTheConsole(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, engine testkit.Engine) {
		e := newOpsOn(t, engine)
		pending, _ := e.write(t, "orders", "o-1", "order.placed")
		dead := e.writeDead(t, "orders", "o-2", "order.placed")
		published, publishedEvent := e.write(t, "orders", "o-3", "order.placed")
		e.exec(t, `UPDATE outbox SET state = 'published', published_at = $1 WHERE id = $2`, time.Now().UTC(), published)
		// --allow-writes is read from the command line only: a variable left in
		// the environment does not open the console to writes.
		b := startOutbox(t, map[string]string{"OUTBOX_ALLOW_WRITES": "true"}, append([]string{"ui", "--listen", "127.0.0.1:0"}, e.flags...)...)
		b.waitOutput(t, "serving the outbox console (read-only) on http://")
		base := regexp.MustCompile(`http://\S+/`).FindString(b.stdout.String())
		code, page := get(t, base)
		if code != http.StatusOK || !strings.Contains(page, "read-only") || strings.Contains(page, e.db.URL) ||
			e.mysql() != strings.Contains(page, "Not read on MySQL/MariaDB") {
			t.Fatalf("GET / = %d:\n%s", code, page)
		}
		code, body := get(t, base+"api/overview")
		var ov struct {
			Backlog, Dead int64
			Unsupported   bool `json:"topics_unsupported"`
		}
		if err := json.Unmarshal([]byte(body), &ov); code != http.StatusOK || err != nil || ov.Backlog != 1 || ov.Dead != 1 || ov.Unsupported != e.mysql() {
			t.Errorf("api/overview = %d %s; want backlog 1, dead 1", code, body)
		}
		for _, p := range []struct{ path, want string }{
			{"relays", "Relays"},
			{"dead", "o-2"},
			{"dead?topic=orders", "o-2"},
			{"events?by=aggregate&q=o-1", "o-1"},
			{"events?by=event&q=" + publishedEvent, "o-3"},
			{"events/" + strconv.FormatInt(pending, 10), "o-1"},
			{"events/" + strconv.FormatInt(dead, 10), "broker said no"},
			{"replay?since=1h", "1 event(s)"},
		} {
			if code, body := get(t, base+p.path); code != http.StatusOK || !strings.Contains(body, p.want) {
				t.Errorf("GET %s = %d, want 200 and %q:\n%.3000s", p.path, code, p.want, body)
			}
		}
		b.wantCleanStop(t)

		// With --allow-writes a retry goes through the confirmation's form.
		w := startOutbox(t, nil, append([]string{"ui", "--listen", "127.0.0.1:0", "--allow-writes"}, e.flags...)...)
		w.waitOutput(t, "serving the outbox console (writes allowed) on http://")
		base = regexp.MustCompile(`http://\S+/`).FindString(w.stdout.String())
		jar, _ := cookiejar.New(nil)
		client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Get(base + "dead/confirm?action=retry&ids=" + strconv.FormatInt(dead, 10))
		if err != nil {
			t.Fatal(err)
		}
		confirm, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		token := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(string(confirm))
		if resp.StatusCode != http.StatusOK || token == nil {
			t.Fatalf("GET dead/confirm = %d without a CSRF token:\n%s", resp.StatusCode, confirm)
		}
		resp, err = client.PostForm(base+"dead/retry", url.Values{"ids": {strconv.FormatInt(dead, 10)}, "csrf": {token[1]}})
		if err != nil {
			t.Fatal(err)
		}
		done, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if s, _ := e.state(t, dead); resp.StatusCode != http.StatusOK || s != "pending" {
			t.Errorf("POST dead/retry = %d, row %d %s; want 200 and pending:\n%s", resp.StatusCode, dead, s, done)
		}
		w.wantCleanStop(t)
	})
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

// ui --schemas serves an index of every selected table and each table's
// console under tables/<schema>.<table>/; a new tenant's table appears and
// a dropped one's URLs answer 404, without a restart. A pattern that
// selects no schema fails at start.
func TestUISchemas(t *testing.T) {
	t.Parallel()
	e := newTenants(t, "a", "b")
	e.write(t, "b")
	code, _, errOut := outbox(t, "ui", "--listen", "127.0.0.1:0", "--database-url", e.base.URL, "--schemas", e.prefix+"_typo_*")
	if code != 1 || !strings.Contains(errOut, "selects no schema") {
		t.Errorf("a pattern matching nothing: exit %d, stderr %q; want 1 and the reason", code, errOut)
	}

	b := startOutbox(t, nil, append([]string{"ui", "--listen", "127.0.0.1:0", "--discover-interval", "100ms"}, e.flags()...)...)
	b.waitOutput(t, "serving the outbox console (read-only) on http://")
	base := regexp.MustCompile(`http://\S+/`).FindString(b.stdout.String())
	table := func(name string) string { return base + "tables/" + e.prefix + "_" + name + ".outbox/" }
	code, body := get(t, base)
	if code != http.StatusOK || !strings.Contains(body, "2 table(s)") || !strings.Contains(body, `href="./tables/`+e.prefix+`_a.outbox/"`) ||
		!strings.Contains(body, `href="./tables/`+e.prefix+`_b.outbox/"`) || strings.Contains(body, e.base.URL) {
		t.Fatalf("GET / = %d:\n%s", code, body)
	}
	code, body = get(t, table("b")+"api/overview")
	var ov struct{ Backlog int64 }
	if code != http.StatusOK || json.Unmarshal([]byte(body), &ov) != nil || ov.Backlog != 1 {
		t.Errorf("b's api/overview = %d %s; want backlog 1", code, body)
	}
	if code, body := get(t, table("a")+"api/overview"); code != http.StatusOK || !strings.Contains(body, `"backlog":0`) {
		t.Errorf("a's api/overview = %d %s; want backlog 0", code, body)
	}

	e.add(t, "c", false) // not migrated: not listed, and said so
	e.add(t, "d", true)
	waitFor(t, 10*time.Second, "the new tenant's table on the index", func() bool {
		_, body := get(t, base)
		return strings.Contains(body, e.prefix+"_d.outbox") && strings.Contains(body, "3 table(s)")
	})
	if code, _ := get(t, table("d")); code != http.StatusOK {
		t.Errorf("GET d's overview = %d, want 200", code)
	}
	if _, body := get(t, base); strings.Contains(body, e.prefix+"_c.outbox") {
		t.Errorf("a schema without a migrated outbox table is on the index:\n%s", body)
	}
	ctx, cancel := contextTimeout(30 * time.Second)
	defer cancel()
	if err := e.schemas["a"].Drop(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the dropped table's URLs to answer 404", func() bool {
		code, _ := get(t, table("a")+"dead")
		return code == http.StatusNotFound
	})
	if _, body := get(t, base); strings.Contains(body, e.prefix+"_a.outbox") {
		t.Errorf("the dropped table is still on the index:\n%s", body)
	}
	if log := b.stderr.String(); !strings.Contains(log, "not showing a selected schema's table") || !strings.Contains(log, e.prefix+"_c") {
		t.Errorf("the unmigrated schema is not logged:\n%s", log)
	}
	b.wantCleanStop(t)
}
