package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/ident"
)

// oddSchemas are tenant names (after the tenants' prefix) that are not
// plain identifiers: PostgreSQL allows them, so --schemas serves them.
var oddSchemas = []string{"sp ace", `q"x`, "ü"}

// shown is how the CLI's text output names tenant name's table.
func (e *tenants) shown(name string) string {
	return ident.Quote(e.prefix+"_"+name) + ".outbox"
}

// migrate up, status and relay --schemas serve every schema the pattern
// selects, whatever its name, beside a plain one: each is migrated, shown
// (quoted, and escaped for the terminal) and published from, including a
// tenant migrated on its own (migrate up --schema) whose pending row was
// written by plain SQL. None is left out, silently or not.
func TestSchemasOfAnyName(t *testing.T) {
	t.Parallel()
	e := newTenants(t)
	e.add(t, "a", false)
	for _, n := range oddSchemas {
		e.add(t, n, false)
	}
	ctrl := "c\x1b[2Jx\ny" // a name that would clear a terminal and forge a line
	e.add(t, ctrl, false)

	code, out, errOut := outbox(t, append([]string{"migrate", "up"}, e.flags()...)...)
	if code != 0 {
		t.Fatalf("migrate up --schemas: exit %d, %s, stderr %q", code, out, errOut)
	}
	for _, n := range append([]string{"a"}, oddSchemas...) {
		shown := e.shown(n)
		if n == "a" {
			shown = e.prefix + "_a.outbox"
		}
		if want := shown + ": applied version(s) 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12\n"; !strings.Contains(out, want) {
			t.Errorf("migrate up --schemas: stdout lacks %q:\n%s", want, out)
		}
	}
	escaped := `"` + e.prefix + `_c\x1b[2Jx\ny".outbox: applied version(s)`
	if !strings.Contains(out, escaped) || strings.ContainsRune(out, 0x1b) || strings.Count(out, "\n") != 5 {
		t.Errorf("migrate up --schemas: the control characters of a name are not escaped (want %q on one line):\n%q", escaped, out)
	}

	hand := e.add(t, "hand made", false)
	if code, out, errOut := outbox(t, "migrate", "up", "--database-url", e.base.URL, "--schema", hand.Name); code != 0 {
		t.Fatalf("migrate up --schema %q: exit %d, %s, stderr %q", hand.Name, code, out, errOut)
	}
	if _, err := hand.SQL.Exec(`INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload)
		VALUES (gen_random_uuid(), 'orders', 'o-1', 'order.placed', '{}')`); err != nil {
		t.Fatal(err)
	}
	for _, n := range oddSchemas {
		e.write(t, n)
	}
	code, out, errOut = outbox(t, append([]string{"status"}, e.flags()...)...)
	if code != 0 {
		t.Fatalf("status --schemas: exit %d, %s, stderr %q", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 7 || strings.ContainsRune(out, 0x1b) {
		t.Errorf("status --schemas: want a header and 6 rows, nothing unescaped:\n%q", out)
	}
	for _, n := range append(oddSchemas, "hand made") {
		found := false
		for _, l := range lines {
			if rest, ok := strings.CutPrefix(l, e.shown(n)+" "); ok {
				found = true
				if backlog := strings.Fields(rest)[0]; backlog != "1" {
					t.Errorf("status --schemas: %s backlog %s, want 1", e.shown(n), backlog)
				}
			}
		}
		if !found {
			t.Errorf("status --schemas: no row for %s:\n%s", e.shown(n), out)
		}
	}
	code, out, _ = outbox(t, append([]string{"status", "--json"}, e.flags()...)...)
	var got struct {
		Tables []struct {
			Table string `json:"table"`
		} `json:"tables"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("status --schemas --json: exit %d, %s", code, out)
	}
	var names []string
	for _, tb := range got.Tables {
		names = append(names, tb.Table)
	}
	if want := ident.Quote(e.prefix+"_"+ctrl) + ".outbox"; len(names) != 6 || !slices.Contains(names, want) {
		t.Errorf("status --schemas --json: tables %q; want 6, %q among them as it is", names, want)
	}

	b := startOutbox(t, nil, append([]string{"relay", "--dev-broker", "--discover-interval", "200ms", "--metrics-addr", "127.0.0.1:0",
		"--poll-interval", "50ms", "--heartbeat", "100ms", "--stale-after", "1s", "--lease", "2s"}, e.flags()...)...)
	b.waitOutput(t, "serving /metrics")
	base := "http://" + servingAddr.FindStringSubmatch(b.stderr.String())[1]
	waitFor(t, 20*time.Second, "every tenant's row published", func() bool {
		for _, n := range append(oddSchemas, "hand made") {
			if e.published(t, n) != 1 {
				return false
			}
		}
		return true
	})
	waitFor(t, 10*time.Second, "/readyz to list six ready tables", func() bool {
		code, body := get(t, base+"/readyz")
		var ready struct {
			Tables []map[string]any `json:"tables"`
		}
		return code == http.StatusOK && json.Unmarshal([]byte(body), &ready) == nil && len(ready.Tables) == 6
	})
	if _, body := get(t, base+"/metrics"); !strings.Contains(body, `txoutbox_table="\"`+e.prefix+`_sp ace\".outbox"`) {
		t.Errorf("no metrics for %s:\n%s", e.shown("sp ace"), body)
	}
	if log := b.stderr.String(); strings.Contains(log, "not serving") || strings.ContainsRune(log, 0x1b) {
		t.Errorf("the relay's log: a table not served, or a name unescaped:\n%q", log)
	}
	b.wantCleanStop(t)
}

// ui --schemas lists every selected table whatever its schema's name,
// each linked to its console (its name escaped in the URL), which serves
// it.
func TestUISchemasOfAnyName(t *testing.T) {
	t.Parallel()
	e := newTenants(t)
	names := append([]string{"a/b", "p%20c?d#e"}, oddSchemas...)
	for _, n := range names {
		e.add(t, n, true)
	}
	e.write(t, `q"x`)
	b := startOutbox(t, nil, append([]string{"ui", "--listen", "127.0.0.1:0"}, e.flags()...)...)
	b.waitOutput(t, "serving the outbox console (read-only) on http://")
	base := regexp.MustCompile(`http://\S+/`).FindString(b.stdout.String())
	code, body := get(t, base)
	if code != http.StatusOK || !strings.Contains(body, "5 table(s)") {
		t.Fatalf("GET / = %d; want 5 tables:\n%s", code, body)
	}
	for _, n := range names {
		href := "tables/" + url.PathEscape(e.shown(n)) + "/"
		if !strings.Contains(body, `href="./`+href+`"`) {
			t.Errorf("the index lacks a link to %s (%s):\n%s", e.shown(n), href, body)
			continue
		}
		code, page := get(t, base+href+"api/overview")
		var ov struct{ Backlog int64 }
		if code != http.StatusOK || json.Unmarshal([]byte(page), &ov) != nil {
			t.Errorf("%s's api/overview = %d %s", e.shown(n), code, page)
			continue
		}
		if want := int64(map[bool]int{true: 1}[n == `q"x`]); ov.Backlog != want {
			t.Errorf("%s's backlog %d, want %d", e.shown(n), ov.Backlog, want)
		}
		if code, _ := get(t, base+href+"dead"); code != http.StatusOK {
			t.Errorf("%s's dead page = %d, want 200", e.shown(n), code)
		}
	}
	if log := b.stderr.String(); strings.Contains(log, "not showing") || strings.Contains(log, "not serving") {
		t.Errorf("a table left out:\n%s", log)
	}
	b.wantCleanStop(t)
}
