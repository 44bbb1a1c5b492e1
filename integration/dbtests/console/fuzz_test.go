package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin/console"
)

// FuzzDeadRow stores a dead row of fuzzed columns and opens its pages: they
// answer 200, show every value escaped, and stay bounded. `go test` runs
// the seeds (testkit.HostileRows); `go test -fuzz FuzzDeadRow` explores.
func FuzzDeadRow(f *testing.F) {
	for _, r := range testkit.HostileRows() {
		f.Add(r.Topic, r.Type, r.AggregateID, r.LastError, r.ContentType, r.Headers, r.Payload)
	}
	b := setup(f, console.Options{AllowWrites: true})
	f.Fuzz(func(t *testing.T, topic, typ, aggregate, lastError, contentType, headers string, payload []byte) {
		var rowID int64
		err := b.db.SQL.QueryRow(`
INSERT INTO outbox (event_id, topic, aggregate_id, event_type, content_type, payload, headers, state, attempts, last_error)
VALUES (gen_random_uuid(), $1, $2, $3, $4, $5, $6::jsonb, 'dead', 1, $7) RETURNING id`,
			topic, aggregate, typ, contentType, payload, headers, lastError).Scan(&rowID)
		if err != nil {
			return // PostgreSQL cannot store it (not UTF-8, a NUL, headers not JSON): no row to show
		}
		n := id(rowID)
		paths := []string{"events/" + n, "dead?ids=" + n, "dead/confirm?action=drop&ids=" + n, "dead?topic=" + url.QueryEscape(topic),
			"events?by=aggregate&q=" + url.QueryEscape(aggregate), "", "api/overview"}
		for _, path := range paths {
			code, body := b.get(t, path)
			if code >= 500 || code != http.StatusOK && !strings.HasPrefix(path, "dead?topic") && !strings.HasPrefix(path, "events?by") {
				t.Fatalf("GET %.200s = %d:\n%.1000s", path, code, body)
			}
			safePage(t, path, body)
		}
		exec(t, b.db, `DELETE FROM outbox WHERE id = $1`, rowID)
	})
}

// FuzzQuery sends fuzzed query strings to every page that reads one: no
// 500, and an answer as safe as the pages'.
func FuzzQuery(f *testing.F) {
	for _, q := range []string{"topic=a%ffb", "topic=%00", "topic=a;b", "ids=1,2,x", "since=1h&until=2h", "action=retry&all=1",
		"by=event&q=00000000-0000-0000-0000-000000000000", "by=aggregate&q=%1b%5b2J", "limit=99999999999999999999", "after=-1",
		"since=2026-13-45", "topic=" + strings.Repeat("x", 1100), "q=%e2%80%ae", "%zz"} {
		f.Add("dead", q)
		f.Add("dead/confirm", q)
		f.Add("events", q)
		f.Add("replay", q)
	}
	b := setup(f, console.Options{})
	f.Fuzz(func(t *testing.T, page, rawQuery string) {
		switch page {
		case "dead", "dead/confirm", "events", "replay", "api/overview", "relays":
		default:
			return // not a page that reads a query
		}
		req, err := http.NewRequest("GET", b.base+page, nil)
		if err != nil {
			return
		}
		req.URL.RawQuery = rawQuery
		resp, err := b.client.Do(req)
		if err != nil {
			return // the client refuses to send it: no request reaches the console
		}
		body := readAll(t, resp)
		if resp.StatusCode >= 500 {
			t.Fatalf("GET %s?%.300s = %d:\n%.1000s", page, rawQuery, resp.StatusCode, body)
		}
		safePage(t, page, body)
	})
}
