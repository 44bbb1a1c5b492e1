package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/outboxadmin/console"
)

// A Multi lists and serves the table of every schema its list returns,
// whatever the schema's name: quoted on the index as in SQL, escaped in
// its URL (a "/" of the name too), its pages and actions served under it,
// and a name that is markup or holds control characters shown as text.
func TestMultiServesAnySchemaName(t *testing.T) {
	t.Parallel()
	names := []string{"sp ace", `q"x`, "ü", "a/b", "p%20c?d#e", "<b>bold</b>", "c\x1b[2Jx"}
	e := newTenants(t, console.Options{AllowWrites: true}, names...)
	for _, n := range names {
		e.seed(t, n, 2, 1)
	}
	shown := func(n string) string { return ident.Quote(e.prefix+"_"+n) + ".outbox" }
	path := func(n string) string { return "tables/" + url.PathEscape(shown(n)) + "/" }

	code, body := e.get(t, "")
	if code != http.StatusOK || !strings.Contains(body, "7 table(s)") {
		t.Fatalf("GET index = %d; want 7 tables:\n%s", code, body)
	}
	if strings.Contains(body, "<b>bold") || strings.ContainsRune(body, 0x1b) {
		t.Errorf("a schema's name is not escaped on the index:\n%s", body)
	}
	for _, n := range names {
		if !strings.Contains(body, `href="./`+path(n)+`"`) {
			t.Errorf("the index lacks the link %s to %s:\n%s", path(n), shown(n), body)
		}
		code, page := e.get(t, path(n))
		if code != http.StatusOK || !strings.Contains(page, `id="backlog">1<`) || !strings.Contains(page, `id="dead">1<`) {
			t.Errorf("GET %s = %d; want its overview, backlog 1 and 1 dead:\n%s", path(n), code, page)
		}
		if strings.Contains(page, "<b>bold") || strings.ContainsRune(page, 0x1b) {
			t.Errorf("%s: a schema's name is not escaped on its page:\n%s", path(n), page)
		}
		if code, page := e.get(t, path(n)+"dead"); code != http.StatusOK || !strings.Contains(page, "1 dead event(s) match") {
			t.Errorf("GET %sdead = %d:\n%s", path(n), code, page)
		}
	}
	// An action under an escaped name reaches that table.
	ids := e.seed(t, "a/b", 1, 1)
	tok := e.token(t, path("a/b")+"dead/confirm?action=retry&ids="+id(ids[0]))
	if code, page := e.post(t, path("a/b")+"dead/retry", url.Values{"csrf": {tok}, "ids": {id(ids[0])}}); code != http.StatusOK || !strings.Contains(page, "1 event(s) are pending again") {
		t.Fatalf("POST a/b's retry = %d:\n%s", code, page)
	}
	e.wantState(t, "a/b", ids[0], "pending", "its retry")
	if log := e.log.String(); strings.Contains(log, "not serving") {
		t.Errorf("a table left out:\n%s", log)
	}
}
