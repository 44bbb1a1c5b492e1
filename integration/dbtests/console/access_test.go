package console_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin"
	"github.com/txoutbox/txoutbox/outboxadmin/console"
)

// do sends a request to the console with headers, returning status and body.
func (b *bundle) do(t *testing.T, method, path string, form url.Values, header map[string]string) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// DNS rebinding: a browser pointed at the console by a rebound name sends
// that name as Host and as its Origin. Without Options.Hosts only loopback
// names are served; with it, only those names.
func TestHostAndOriginAreChecked(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Options{AllowWrites: true})
	target := b.dead[0]
	rebound := "rebind.attacker.example:18473"
	if code, body := b.do(t, "GET", "events/"+id(target), nil, map[string]string{"Host": rebound}); code != http.StatusMisdirectedRequest || strings.Contains(body, "broker said no") {
		t.Errorf("GET under a rebound Host = %d, want 421 without the event:\n%s", code, body)
	}
	for _, host := range []string{"localhost:8080", "127.0.0.1", "[::1]:9", "console.localhost", "LOCALHOST."} {
		if code, _ := b.do(t, "GET", "", nil, map[string]string{"Host": host}); code != http.StatusOK {
			t.Errorf("GET with Host %s = %d, want 200 (loopback)", host, code)
		}
	}
	// The token is readable under the real name only; a POST with it, the
	// rebound Host and a same-origin Origin is refused before it is read.
	tok := b.token(t, "dead/confirm?action=drop&ids="+id(target))
	form := url.Values{"csrf": {tok}, "ids": {id(target)}}
	if code, _ := b.do(t, "POST", "dead/drop", form, map[string]string{"Host": rebound, "Origin": "http://" + rebound, "Sec-Fetch-Site": "same-origin"}); code != http.StatusMisdirectedRequest {
		t.Errorf("POST under a rebound Host = %d, want 421", code)
	}
	// The right Host with another site's Origin.
	if code, _ := b.do(t, "POST", "dead/drop", form, map[string]string{"Origin": "http://" + rebound}); code != http.StatusForbidden {
		t.Errorf("POST from another Origin = %d, want 403", code)
	}
	if code, _ := b.do(t, "GET", "api/overview", nil, map[string]string{"Origin": "null"}); code != http.StatusForbidden {
		t.Errorf("GET from Origin null = %d, want 403", code)
	}
	if s := b.state(t, target); s != "dead" {
		t.Fatalf("row %d is %s after refused requests, want dead", target, s)
	}
	if log := b.log.String(); !strings.Contains(log, "refused a request for another host") || !strings.Contains(log, "rebind.attacker.example") {
		t.Errorf("log lacks the refusal:\n%s", log)
	}

	// An allow-list: its names and nothing else, loopback included.
	named := setup(t, console.Options{Hosts: []string{"outbox.internal.example"}})
	if code, _ := named.do(t, "GET", "", nil, map[string]string{"Host": "outbox.internal.example:443"}); code != http.StatusOK {
		t.Errorf("GET with an allowed Host = %d, want 200", code)
	}
	if code, _ := named.do(t, "GET", "", nil, nil); code != http.StatusMisdirectedRequest {
		t.Errorf("GET with a loopback Host on a named console = %d, want 421", code)
	}
	anyHost := setup(t, console.Options{Hosts: []string{"*"}})
	if code, _ := anyHost.do(t, "GET", "", nil, map[string]string{"Host": rebound}); code != http.StatusOK {
		t.Errorf(`GET with any Host on Hosts ["*"] = %d, want 200`, code)
	}
	adm, err := outboxadmin.New(b.db.SQL, outboxadmin.Config{Table: b.db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	// A URL, and a pattern: no name matches one, so the console would
	// serve none of the names its operator meant.
	for _, h := range []string{"http://x/", "*.example.com"} {
		if _, err := console.New(adm, console.Options{Hosts: []string{h}}); !errors.Is(err, console.ErrInvalidOptions) || !strings.Contains(err.Error(), "is not a host name") {
			t.Errorf("New with Hosts [%q] = %v, want it refused as not a host name", h, err)
		}
	}
}

// Options.Authenticate runs first; its operator names every change.
func TestAuthenticateAndOperator(t *testing.T) {
	t.Parallel()
	auth, err := console.TokenAuth("0123456789abcdef-secret")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := console.TokenAuth("short"); err == nil {
		t.Error("TokenAuth accepted a 5-byte token")
	}
	b := setup(t, console.Options{AllowWrites: true, Authenticate: auth})
	if code, body := b.get(t, "events/"+id(b.dead[0])); code != http.StatusUnauthorized || strings.Contains(body, "broker said no") {
		t.Fatalf("GET without credentials = %d:\n%s", code, body)
	}
	req, _ := http.NewRequest("GET", b.base, nil)
	req.SetBasicAuth("alice", "wrong-token-wrong-token")
	if resp, err := b.client.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("GET with a wrong token = %v, %v; want 401 with a challenge", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	b.client.Transport = basicAuth{"alice", "0123456789abcdef-secret"}
	tok := b.token(t, "dead/confirm?action=retry&ids="+id(b.dead[0]))
	if code, body := b.post(t, "dead/retry", url.Values{"csrf": {tok}, "ids": {id(b.dead[0])}}); code != http.StatusOK {
		t.Fatalf("POST retry with the token = %d:\n%s", code, body)
	}
	if log := b.log.String(); !strings.Contains(log, "retried dead events") || !strings.Contains(log, "operator=alice") {
		t.Errorf("the change's log line does not name the operator:\n%s", log)
	}
}

type basicAuth struct{ user, pass string }

func (a basicAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(a.user, a.pass)
	return http.DefaultTransport.RoundTrip(r)
}

// Bad input is 400 with the reason, never a 500 or a filter dropped.
func TestBadInputIs400(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Options{})
	for _, tc := range []struct{ path, want string }{
		{"events?by=event&q=00000000-0000-0000-0000-000000000000", "zero UUID"},
		{"dead?topic=%00", "NUL"},
		{"dead?topic=a%ffb", "not UTF-8"},
		{"dead?aggregate=%ff", "not UTF-8"},
		{"events?by=aggregate&q=%ff", "not UTF-8"},
		{"replay?since=1h&topic=%ff", "not UTF-8"},
		{"dead/confirm?action=drop&topic=orders;x", "malformed query"},
		{"dead?topic=payments;", "malformed query"},
		{"dead?topic=%zz", "malformed query"},
		{"static/", "not found"},
	} {
		code, body := b.get(t, tc.path)
		want := http.StatusBadRequest
		if strings.HasPrefix(tc.path, "static") {
			want = http.StatusNotFound
		}
		if code != want || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s = %d, want %d with %q:\n%.1500s", tc.path, code, want, tc.want, body)
		}
	}
}

// Every tab and page shares one status reading per SampleEvery: the
// figures of a second request within it are the first's, even when the
// table changed in between.
func TestStatusIsSharedAcrossRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Options{SampleEvery: time.Hour})
	_, first := b.get(t, "api/overview")
	exec(t, b.db, `UPDATE outbox SET state = 'dead' WHERE state = 'pending'`)
	_, second := b.get(t, "api/overview")
	_, page := b.get(t, "")
	if !strings.Contains(first, `"backlog":3`) || !strings.Contains(second, `"backlog":3`) || !strings.Contains(page, `id="backlog">3<`) {
		t.Errorf("the second reading is not the first's:\n%s\n%s", first, second)
	}
	// The card prints the rate as a number or a dash, never a pointer.
	if strings.Contains(page, "%!") || !strings.Contains(page, `id="rate">–<`) {
		t.Errorf("publish rate card is wrong:\n%s", page)
	}
}

// With two samples the rate card shows a number per second.
func TestPublishRateCard(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Options{SampleEvery: 20 * time.Millisecond, History: time.Minute})
	rate := regexp.MustCompile(`id="rate">([^<]*)<`)
	var card string
	// A count that took 25 ms or more is paced, the next no sooner than
	// 100 times as long: on CI's two loaded cores one took over 200 ms,
	// and the second sample came more than 20 s later.
	testkit.WaitFor(t, 90*time.Second, "a second sample", func() bool {
		_, page := b.get(t, "")
		card = rate.FindStringSubmatch(page)[1]
		return card != "–"
	})
	if !regexp.MustCompile(`^\d+\.\d/s$`).MatchString(card) {
		t.Errorf("publish rate card = %q, want a rate", card)
	}
}

// A count that fails is paced as a slow one, as the relays pace theirs:
// the next poll does not run it again (a count that ran into the
// statement timeout would otherwise run again at once, one after another,
// for as long as a tab is open). A request whose client gave up paces
// nothing: the next one counts.
func TestStatusPacesAFailedCount(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Options{SampleEvery: time.Hour})

	// The client gives up while the count waits on a lock.
	tx, err := b.db.SQL.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	req, _ := http.NewRequestWithContext(ctx, "GET", b.base+"api/overview", nil)
	if resp, err := b.client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("api/overview behind a lock = %d, want the client to give up", resp.StatusCode)
	}
	cancel()
	tx.Rollback()
	if code, body := b.get(t, "api/overview"); code != http.StatusOK || !strings.Contains(body, `"backlog":3`) {
		t.Fatalf("api/overview after a request that gave up = %d, want 200 with backlog 3:\n%s", code, body)
	}

	// A count that fails (here: a column it reads is gone) is not run
	// again within SampleEvery.
	c := setup(t, console.Options{SampleEvery: time.Hour})
	exec(t, c.db, `ALTER TABLE outbox RENAME COLUMN topic TO topic_away`)
	if code, body := c.get(t, "api/overview"); code != http.StatusInternalServerError {
		t.Fatalf("api/overview with the count failing = %d, want 500:\n%s", code, body)
	}
	exec(t, c.db, `ALTER TABLE outbox RENAME COLUMN topic_away TO topic`)
	if code, body := c.get(t, "api/overview"); code != http.StatusInternalServerError {
		t.Errorf("api/overview right after a failed count = %d, want the failure again (500), not a new count:\n%s", code, body)
	}
}
