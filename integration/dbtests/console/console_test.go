package console_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin"
	"github.com/txoutbox/txoutbox/outboxadmin/console"
)

// bundle is one test's outbox with the console mounted under /admin/outbox/
// as an application would, behind StripPrefix.
type bundle struct {
	db     *testkit.DB
	srv    *httptest.Server
	client *http.Client
	base   string // the console's root URL
	log    *testkit.SyncBuffer
	// ids of the seeded rows by state.
	pending, published, dead []int64
}

// setup seeds 3 pending events (topic orders), 2 published (orders) and 2
// dead (one orders, one payments) and serves the console.
func setup(t testing.TB, opts console.Options) *bundle {
	t.Helper()
	db := testkit.NewOutbox(t)
	b := &bundle{db: db, log: &testkit.SyncBuffer{}}
	w := testkit.NewWriter(t, db.Table())
	ctx := context.Background()
	write := func(topic, agg, typ string) int64 {
		t.Helper()
		e, err := txoutbox.NewEvent(topic, "order", agg, typ, map[string]any{"agg": agg, "total": 42})
		if err != nil {
			t.Fatal(err)
		}
		testkit.Commit(t, ctx, db.SQL, w, e)
		var id int64
		if err := db.SQL.QueryRow(`SELECT max(id) FROM outbox`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	for i := range 2 {
		id := write("orders", "p-"+strconv.Itoa(i), "order.placed")
		b.published = append(b.published, id)
		exec(t, db, `UPDATE outbox SET state = 'published', published_at = now() WHERE id = $1`, id)
	}
	for i := range 3 {
		b.pending = append(b.pending, write("orders", "o-"+strconv.Itoa(i), "order.placed"))
	}
	for _, topic := range []string{"orders", "payments"} {
		id := write(topic, "d-"+topic, "order.paid")
		b.dead = append(b.dead, id)
		exec(t, db, `UPDATE outbox SET state = 'dead', attempts = 5, last_error = $2 WHERE id = $1`, id, "broker said no to "+topic)
	}
	adm, err := outboxadmin.New(db.SQL, outboxadmin.Config{Table: db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	opts.Logger = slog.New(slog.NewTextHandler(b.log, nil))
	con, err := console.New(adm, opts)
	if err != nil {
		t.Fatal(err)
	}
	b.serve(t, con)
	return b
}

// serve mounts h under /admin/outbox/ and serves it to b's client, which
// keeps cookies and does not follow redirects.
func (b *bundle) serve(t testing.TB, h http.Handler) {
	mux := http.NewServeMux()
	mux.Handle("/admin/outbox/", http.StripPrefix("/admin/outbox", h))
	// The bare prefix too: the console sends it to the prefix with a slash.
	mux.Handle("/admin/outbox", http.StripPrefix("/admin/outbox", h))
	b.srv = httptest.NewServer(mux)
	t.Cleanup(b.srv.Close)
	jar, _ := cookiejar.New(nil)
	b.client = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	b.base = b.srv.URL + "/admin/outbox/"
}

func exec(t testing.TB, db *testkit.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.SQL.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func (b *bundle) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := b.client.Get(b.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (b *bundle) post(t *testing.T, path string, form url.Values) (int, string) {
	t.Helper()
	resp, err := b.client.PostForm(b.base+path, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

var (
	csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	csrfMeta  = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)
)

// token loads a page with a form and returns its CSRF token.
func (b *bundle) token(t *testing.T, page string) string {
	t.Helper()
	code, body := b.get(t, page)
	m := csrfInput.FindStringSubmatch(body)
	if code != http.StatusOK || m == nil {
		t.Fatalf("GET %s = %d without a CSRF token:\n%s", page, code, body)
	}
	return m[1]
}

func (b *bundle) state(t *testing.T, id int64) string {
	t.Helper()
	var s string
	err := b.db.SQL.QueryRow(`SELECT state FROM outbox WHERE id = $1`, id).Scan(&s)
	if errors.Is(err, sql.ErrNoRows) {
		return "gone"
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func id(n int64) string { return strconv.FormatInt(n, 10) }

// pageCase is a page to GET, the status it answers and what its body
// holds.
type pageCase struct {
	path string
	code int
	want []string
}

// wantPages GETs each page and checks its status and body.
func (b *bundle) wantPages(t *testing.T, cases []pageCase) {
	t.Helper()
	for _, tc := range cases {
		code, body := b.get(t, tc.path)
		if code != tc.code {
			t.Errorf("GET %s = %d, want %d:\n%s", tc.path, code, tc.code, body)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: body lacks %q:\n%s", tc.path, w, body)
			}
		}
	}
}

func TestPages(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Options{Title: "orders-test"})
	deadID, payID, pubID := b.dead[0], b.dead[1], b.published[0]
	var eventID string
	if err := b.db.SQL.QueryRow(`SELECT event_id::text FROM outbox WHERE id = $1`, deadID).Scan(&eventID); err != nil {
		t.Fatal(err)
	}
	b.wantPages(t, []pageCase{
		{"", http.StatusOK, []string{"orders-test", `id="backlog">3<`, `id="dead">2<`, "read-only", "payments"}},
		{"relays", http.StatusOK, []string{"No relay is registered", "256 shards", `title="shard 255: no owner"`, `http-equiv="refresh"`}},
		{"dead", http.StatusOK, []string{"2 dead event(s) match", "broker said no to orders", "events/" + id(deadID)}},
		{"dead?topic=payments", http.StatusOK, []string{"1 dead event(s) match", "events/" + id(payID)}},
		{"dead?since=1h&until=2026-01-01T00:00:00Z", http.StatusBadRequest, []string{"is not before until"}},
		{"dead?since=yesterday", http.StatusBadRequest, []string{"since: &#34;yesterday&#34; is not a time"}},
		{"dead?limit=0", http.StatusBadRequest, []string{"limit"}},
		{"dead?limit=1", http.StatusOK, []string{"next page", "after=" + id(deadID)}},
		{"dead?after=-3", http.StatusBadRequest, []string{"after"}},
		{"dead?topic=" + strings.Repeat("x", 2000), http.StatusBadRequest, []string{"longer than 1024 bytes"}},
		{"dead/confirm?action=retry&ids=" + id(deadID), http.StatusOK, []string{"Retry returns these 1 event(s)", "read-only"}},
		{"dead/confirm?action=drop&topic=orders", http.StatusOK, []string{"Drop deletes these 1 event(s)"}},
		{"dead/confirm?action=retry&all=1", http.StatusOK, []string{"these 2 event(s)"}},
		{"dead/confirm?action=retry&ids=" + id(pubID) + "," + id(deadID), http.StatusOK, []string{"Not dead or no such event: " + id(pubID), "these 1 event(s)"}},
		{"dead/confirm?action=explode&ids=1", http.StatusBadRequest, []string{"neither retry nor drop"}},
		{"dead/confirm?action=retry", http.StatusBadRequest, []string{"select events first"}},
		{"dead/confirm?action=retry&ids=1,x", http.StatusBadRequest, []string{"not an event ID"}},
		{"events", http.StatusOK, []string{"Find by"}},
		{"events?by=event&q=" + eventID, http.StatusOK, []string{"events/" + id(deadID), "dead"}},
		{"events?by=aggregate&q=p-0", http.StatusOK, []string{"events/" + id(pubID), "published"}},
		{"events?by=aggregate&q=nobody", http.StatusOK, []string{"Nothing found."}},
		{"events?by=event&q=not-a-uuid", http.StatusBadRequest, []string{"not an event id (a UUID)"}},
		{"events?by=colour&q=red", http.StatusBadRequest, []string{"none of id, event, aggregate"}},
		{"events?by=id&q=" + id(deadID), http.StatusSeeOther, nil},
		{"events?by=id&q=-1", http.StatusBadRequest, []string{"not an event ID"}},
		{"events/" + id(deadID), http.StatusOK, []string{"broker said no to orders", `&#34;total&#34;: 42`, "Retry…", "application/json"}},
		{"events/" + id(pubID), http.StatusOK, []string{"published"}},
		{"events/99999999", http.StatusNotFound, []string{"no such event"}},
		{"events/abc", http.StatusBadRequest, []string{"not an event ID"}},
		{"replay", http.StatusOK, []string{"Published since"}},
		{"replay?since=1h", http.StatusOK, []string{"Would replay 2 event(s)", "read-only"}},
		{"replay?since=1h&topic=payments", http.StatusOK, []string{"Would replay 0 event(s)"}},
		{"replay?topic=orders", http.StatusBadRequest, []string{"since is required"}},
		{"replay?since=-5m", http.StatusBadRequest, []string{"negative duration"}},
		{"static/console.js", http.StatusOK, []string{`getAttribute("data-api")`}},
		{"static/console.css", http.StatusOK, []string{".grid"}},
		{"nope", http.StatusNotFound, []string{"not found"}},
	})
	// Mounted at /admin/outbox, the bare prefix goes to the overview.
	resp, err := b.client.Get(b.srv.URL + "/admin/outbox")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/admin/outbox/" {
		t.Errorf("GET /admin/outbox = %d to %q, want 301 to /admin/outbox/", resp.StatusCode, resp.Header.Get("Location"))
	}
	// GET-only pages refuse other methods.
	if code, _ := b.post(t, "dead", url.Values{}); code != http.StatusMethodNotAllowed {
		t.Errorf("POST dead = %d, want 405", code)
	}
	// Nothing above changed a row.
	for _, id := range b.dead {
		if s := b.state(t, id); s != "dead" {
			t.Errorf("row %d is %s after reads, want dead", id, s)
		}
	}
}

func TestOverviewJSONMatchesTheDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Options{})
	code, body := b.get(t, "api/overview")
	if code != http.StatusOK {
		t.Fatalf("GET api/overview = %d: %s", code, body)
	}
	var got struct {
		Backlog, Dead int64
		LagSeconds    float64 `json:"lag_seconds"`
		Topics        []struct {
			Topic         string
			Backlog, Dead int64
		}
		History []struct{ Backlog int64 }
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	var backlog, dead int64
	if err := b.db.SQL.QueryRow(`SELECT count(*) FILTER (WHERE state IN ('pending','claimed')), count(*) FILTER (WHERE state = 'dead') FROM outbox`).Scan(&backlog, &dead); err != nil {
		t.Fatal(err)
	}
	if got.Backlog != backlog || got.Dead != dead || got.LagSeconds <= 0 || len(got.History) != 1 || got.History[0].Backlog != backlog {
		t.Errorf("overview = %+v, want backlog %d, dead %d, a lag and one sample", got, backlog, dead)
	}
	if len(got.Topics) != 2 || got.Topics[0].Topic != "orders" || got.Topics[0].Backlog != 3 || got.Topics[0].Dead != 1 ||
		got.Topics[1].Topic != "payments" || got.Topics[1].Dead != 1 {
		t.Errorf("topics = %+v", got.Topics)
	}
}

func TestWritesNeedTheCSRFToken(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Options{AllowWrites: true})
	target := b.dead[0]
	form := url.Values{"ids": {id(target)}}
	// No cookie, no token.
	if code, body := b.post(t, "dead/retry", form); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("POST without token = %d, want 403:\n%s", code, body)
	}
	tok := b.token(t, "dead/confirm?action=retry&ids="+id(target))
	// The cookie now, but no token, then a forged one.
	if code, _ := b.post(t, "dead/retry", form); code != http.StatusForbidden {
		t.Errorf("POST with the cookie but no token = %d, want 403", code)
	}
	forged := url.Values{"ids": {id(target)}, "csrf": {strings.Repeat("A", len(tok))}}
	if code, _ := b.post(t, "dead/retry", forged); code != http.StatusForbidden {
		t.Errorf("POST with a forged token = %d, want 403", code)
	}
	// A token of another browser (another cookie) does not pass either.
	jar, _ := cookiejar.New(nil)
	other := &http.Client{Jar: jar}
	if resp, err := other.Get(b.base); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	if resp, err := other.PostForm(b.base+"dead/retry", url.Values{"ids": {id(target)}, "csrf": {tok}}); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST with another browser's token = %v %v, want 403", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	if s := b.state(t, target); s != "dead" {
		t.Fatalf("row %d is %s after refused POSTs, want dead", target, s)
	}
	// A cross-site browser POST is refused even with the token.
	req, _ := http.NewRequest(http.MethodPost, b.base+"dead/retry", strings.NewReader(url.Values{"ids": {id(target)}, "csrf": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if resp, err := b.client.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site POST = %v %v, want 403", resp.StatusCode, err)
	}

	form.Set("csrf", tok)
	code, body := b.post(t, "dead/retry", form)
	if code != http.StatusOK || !strings.Contains(body, "1 event(s) are pending again") {
		t.Fatalf("POST retry = %d:\n%s", code, body)
	}
	if s := b.state(t, target); s != "pending" {
		t.Errorf("row %d is %s after the retry, want pending", target, s)
	}
	if log := b.log.String(); !strings.Contains(log, "retried dead events") || !strings.Contains(log, "count=1") || !strings.Contains(log, "ids="+id(target)) {
		t.Errorf("log lacks the retry:\n%s", log)
	}
	// Confirming again: the row is no longer dead, so nothing changes.
	if code, body := b.post(t, "dead/retry", form); code != http.StatusConflict || !strings.Contains(body, "nothing changed") {
		t.Errorf("second POST retry = %d, want 409:\n%s", code, body)
	}
	// Drop by filter: the previewed ids only.
	tok = b.token(t, "dead/confirm?action=drop&topic=payments")
	drop := url.Values{"csrf": {tok}, "ids": {id(b.dead[1])}, "topic": {"payments"}}
	if code, body := b.post(t, "dead/drop", drop); code != http.StatusOK || !strings.Contains(body, "1 event(s) deleted") {
		t.Fatalf("POST drop = %d:\n%s", code, body)
	}
	if s := b.state(t, b.dead[1]); s != "gone" {
		t.Errorf("dropped row is %s", s)
	}
	// Replay the published rows.
	tok = b.token(t, "replay?since=1h")
	if code, body := b.post(t, "replay", url.Values{"csrf": {tok}, "since": {"1h"}}); code != http.StatusOK || !strings.Contains(body, "2 event(s) are pending again") {
		t.Fatalf("POST replay = %d:\n%s", code, body)
	}
	for _, id := range b.published {
		if s := b.state(t, id); s != "pending" {
			t.Errorf("replayed row %d is %s", id, s)
		}
	}
	if log := b.log.String(); !strings.Contains(log, "dropped dead events") || !strings.Contains(log, "replayed events") {
		t.Errorf("log lacks the drop or the replay:\n%s", log)
	}
	// Bad input to a POST: 400, nothing touched.
	for _, tc := range []struct {
		path string
		form url.Values
		want string
	}{
		{"dead/retry", url.Values{"csrf": {tok}}, "no events to change"},
		{"dead/drop", url.Values{"csrf": {tok}, "ids": {"1,two"}}, "not an event ID"},
		{"dead/drop", url.Values{"csrf": {tok}, "ids": {"1"}, "since": {"whenever"}}, "is not a time"},
		{"replay", url.Values{"csrf": {tok}}, "since is required"},
	} {
		if code, body := b.post(t, tc.path, tc.form); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("POST %s %v = %d, want 400 with %q:\n%s", tc.path, tc.form, code, tc.want, body)
		}
	}
}

func TestReadOnlyRefusesWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Options{})
	// The preview shows what would change but offers no button.
	code, body := b.get(t, "dead/confirm?action=retry&ids="+id(b.dead[0]))
	if code != http.StatusOK || !strings.Contains(body, "read-only") || strings.Contains(body, `id="confirm-form"`) {
		t.Fatalf("read-only preview = %d:\n%s", code, body)
	}
	// With a valid CSRF token (every page carries one) the console still
	// refuses.
	m := csrfMeta.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("page without a CSRF token:\n%s", body)
	}
	tok := m[1]
	for _, tc := range []struct {
		path string
		form url.Values
	}{
		{"dead/retry", url.Values{"ids": {id(b.dead[0])}}},
		{"dead/drop", url.Values{"ids": {id(b.dead[0])}}},
		{"replay", url.Values{"since": {"1h"}}},
	} {
		tc.form.Set("csrf", tok)
		if code, body := b.post(t, tc.path, tc.form); code != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("POST %s on a read-only console = %d, want 403:\n%s", tc.path, code, body)
		}
	}
	for _, id := range b.dead {
		if s := b.state(t, id); s != "dead" {
			t.Errorf("row %d is %s, want dead", id, s)
		}
	}
	for _, id := range b.published {
		if s := b.state(t, id); s != "published" {
			t.Errorf("row %d is %s, want published", id, s)
		}
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	adm, err := outboxadmin.New(db.SQL, outboxadmin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []console.Options{{SampleEvery: -1}, {History: -1}, {SampleEvery: time.Minute, History: time.Second}} {
		if _, err := console.New(adm, opts); !errors.Is(err, console.ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions", opts, err)
		}
	}
	if _, err := console.New(nil, console.Options{}); !errors.Is(err, console.ErrInvalidOptions) {
		t.Errorf("New(nil) = %v, want ErrInvalidOptions", err)
	}
}

// With the WAL relay's slot in place, the overview shows its lag and
// wal_status (HTML and JSON); without one, nothing of it.
func TestOverviewShowsTheWALSlot(t *testing.T) {
	t.Parallel()
	// The status is read once per SampleEvery for every page: a short one
	// shows the slot on the next request.
	b := setup(t, console.Options{SampleEvery: time.Millisecond})
	if code, body := b.get(t, "api/overview"); code != http.StatusOK || strings.Contains(body, "wal_slot") {
		t.Fatalf("GET api/overview without a slot = %d: %s", code, body)
	}
	slot := outboxsql.WALName(b.db.Database(), b.db.Table().Schema, b.db.Table().Name)
	exec(t, b.db, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
	t.Cleanup(func() { _, _ = b.db.SQL.Exec(`SELECT pg_drop_replication_slot($1)`, slot) })
	exec(t, b.db, `SELECT pg_logical_emit_message(true, 'test', 'move the server past the slot')`)
	var code int
	var body string
	testkit.WaitFor(t, 10*time.Second, "the overview read after the slot's creation", func() bool {
		code, body = b.get(t, "api/overview")
		return code != http.StatusOK || strings.Contains(body, "wal_slot")
	})
	if code != http.StatusOK {
		t.Fatalf("GET api/overview = %d: %s", code, body)
	}
	var got struct {
		Slot *struct {
			Name      string
			Active    bool
			WALStatus string `json:"wal_status"`
			LagBytes  int64  `json:"lag_bytes"`
		} `json:"wal_slot"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got.Slot == nil || got.Slot.Name != slot || got.Slot.Active || got.Slot.WALStatus != "reserved" || got.Slot.LagBytes <= 0 {
		t.Fatalf("wal_slot = %+v, want %s, inactive, reserved, with a lag", got.Slot, slot)
	}
	code, page := b.get(t, "")
	if code != http.StatusOK || !strings.Contains(page, "WAL slot") || !strings.Contains(page, "wal_status reserved, no relay streaming") {
		t.Fatalf("GET overview = %d, without the slot's card", code)
	}
}
