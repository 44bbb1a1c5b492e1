package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin/console"
)

var (
	attrValue = regexp.MustCompile(`"[^"]*"`)
	hexRef    = regexp.MustCompile(`&#x[0-9a-f]+;`)
)

// pageMax bounds what any page may weigh with the hostile rows: the largest
// is an event of 100 KB text columns, each shown once, escaped.
const pageMax = 2 << 20

// Every page, preview and action works on every kind of malformed dead row
// (testkit.HostileRows): 200, the row's values escaped, the page bounded,
// and the retry and drop change the row.
func TestHostileDeadRows(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Options{AllowWrites: true})
	ids := testkit.SeedHostile(t, b.db)
	check := func(path string, _ int, body string) {
		t.Helper()
		safePage(t, path, body)
	}
	for _, path := range []string{"", "api/overview", "relays", "dead", "dead?limit=500", "dead?topic=hostile"} {
		code, body := b.get(t, path)
		if code != http.StatusOK {
			t.Errorf("GET %s = %d:\n%.2000s", path, code, body)
		}
		check(path, code, body)
	}
	for _, r := range testkit.HostileRows() {
		id := id(ids[r.Kind])
		paths := []string{"events/" + id, "dead?ids=" + id, "dead/confirm?action=retry&ids=" + id, "dead/confirm?action=drop&ids=" + id}
		if len(r.Topic) <= 1024 {
			paths = append(paths, "dead?topic="+url.QueryEscape(r.Topic), "dead/confirm?action=drop&topic="+url.QueryEscape(r.Topic))
		}
		if len(r.AggregateID) <= 1024 {
			paths = append(paths, "events?by=aggregate&q="+url.QueryEscape(r.AggregateID))
		}
		for _, path := range paths {
			code, body := b.get(t, path)
			if code != http.StatusOK {
				t.Errorf("%s: GET %s = %d:\n%.2000s", r.Kind, path, code, body)
			}
			check(path, code, body)
			if strings.HasPrefix(path, "events/") {
				if strings.HasPrefix(r.Kind, "headers-") && r.Kind != "headers-escapes" && r.Kind != "headers-null" &&
					!strings.Contains(body, "not a JSON object of strings") {
					t.Errorf("%s: the event page does not say the headers are malformed", r.Kind)
				}
				if r.Kind == "payload-deep" && !strings.Contains(body, "json, compact") {
					t.Errorf("%s: the deep payload is not shown compact", r.Kind)
				}
				// Past 256 KiB, the first 4 KiB: the string's start.
				if cut := fmt.Sprintf("the first 4096 of %d bytes, %d cut", len(r.Payload), len(r.Payload)-4096); r.Kind == "payload-large" &&
					(!strings.Contains(body, cut) || !strings.Contains(body, "&#34;yyyy")) {
					t.Errorf("%s: the event page does not show the payload's start and say %q", r.Kind, cut)
				}
				if strings.Contains(body, "Next attempt") {
					t.Errorf("%s: a dead event shows a next attempt", r.Kind)
				}
			}
		}
		// Retry, make it dead again, drop.
		tok := b.token(t, "dead/confirm?action=retry&ids="+id)
		code, body := b.post(t, "dead/retry", url.Values{"csrf": {tok}, "ids": {id}})
		check("POST dead/retry", code, body)
		if code != http.StatusOK || b.state(t, ids[r.Kind]) != "pending" {
			t.Errorf("%s: POST dead/retry = %d, row %s:\n%.2000s", r.Kind, code, b.state(t, ids[r.Kind]), body)
		}
		exec(t, b.db, `UPDATE outbox SET state = 'dead' WHERE id = $1`, ids[r.Kind])
		code, body = b.post(t, "dead/drop", url.Values{"csrf": {tok}, "ids": {id}})
		check("POST dead/drop", code, body)
		if code != http.StatusOK || b.state(t, ids[r.Kind]) != "gone" {
			t.Errorf("%s: POST dead/drop = %d, row %s:\n%.2000s", r.Kind, code, b.state(t, ids[r.Kind]), body)
		}
	}
}

// safePage fails t if body has a control or bidirectional character, raw
// or as a reference in its text, or passes pageMax.
func safePage(t *testing.T, path, body string) {
	t.Helper()
	if i, near := testkit.Unsafe(body); i >= 0 {
		t.Errorf("GET %.200s: an unescaped control or bidi character at %d: %q", path, i, near)
	}
	// inertHTML writes what is left as &#x…; references, which a browser
	// shows as the characters themselves: left in text (not in a quoted
	// attribute) they would act as raw ones.
	if m := hexRef.FindString(attrValue.ReplaceAllString(body, `""`)); m != "" {
		t.Errorf("GET %.200s: %s in the page's text: a value not escaped for display", path, m)
	}
	if len(body) > pageMax {
		t.Errorf("GET %.200s: %d bytes, over %d", path, len(body), pageMax)
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The event's page shows each value whole up to a bound, and says where
// to see the rest: a 4 MB header value, last error or event type (other
// tooling's rows; the relay keeps 2,000 bytes of error) would
// otherwise make a page of tens of megabytes, as a deep payload did.
func TestEventPageIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Options{})
	big := strings.Repeat("x", 4<<20)
	// The aggregate id and the topic as long as the schema's indexes let
	// them be (a B-tree entry fits a third of a page), longer than a
	// look-up link is made for (1,024 bytes).
	long := strings.Repeat("x", 2000)
	var rowID int64
	if err := b.db.SQL.QueryRow(`
INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, headers, state, attempts, last_error)
VALUES (gen_random_uuid(), 'T' || $2, 'A' || $2, 'Y' || $1, '{}', jsonb_build_object('k', 'H' || $1), 'dead', 1, 'E' || $1) RETURNING id`, big, long).Scan(&rowID); err != nil {
		t.Fatal(err)
	}
	code, body := b.get(t, "events/"+id(rowID))
	if code != http.StatusOK || len(body) > pageMax || !strings.Contains(body, "bytes in all") {
		t.Fatalf("GET events/%d = %d, %d bytes; want 200 within %d, saying the values were cut:\n%.500s", rowID, code, len(body), pageMax, body)
	}
	safePage(t, "events/"+id(rowID), body)
}
