package consolebrowser

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/chromedp/chromedp"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin"
	"github.com/txoutbox/txoutbox/outboxadmin/console"
	"github.com/txoutbox/txoutbox/relay"
)

// chromiumPath is Debian's chromium package.
const chromiumPath = "/usr/bin/chromium"

// browser starts a headless Chromium of the test's own (a fresh profile)
// and returns a tab's context.
func browser(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	if _, err := exec.LookPath(chromiumPath); err != nil {
		t.Fatalf("chromium is missing (%v): bash .ci/services installs Debian's chromium package", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	// The whole browser session is bounded: a hung page fails the test.
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// do runs browser actions, failing the test on error.
func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one browser action that returns a value.
func get[T any](t *testing.T, ctx context.Context, what string, action chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, action)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// text is the text of the first node sel matches.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return get(t, ctx, "text of "+sel, chromedp.Text(sel))
}

// screenshot writes the page to $CONSOLE_SCREENSHOTS/name.png when set.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := get(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// serve mounts a console under /admin/outbox/ and returns its root URL.
func serve(t *testing.T, adm *outboxadmin.Admin, opts console.Options) string {
	t.Helper()
	con, err := console.New(adm, opts)
	if err != nil {
		t.Fatal(err)
	}
	return mount(t, con)
}

// mount serves h under /admin/outbox/ and returns its root URL.
func mount(t *testing.T, h http.Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/admin/outbox/", http.StripPrefix("/admin/outbox", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/admin/outbox/"
}

func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	db := testkit.NewOutbox(t)
	w := testkit.NewWriter(t, db.Table())
	// 3 published, 4 pending and 2 dead events.
	var events []txoutbox.Event
	for i, spec := range [][2]string{
		{"orders", "o-1"}, {"orders", "o-2"}, {"orders", "o-3"}, // published
		{"orders", "o-4"}, {"orders", "o-5"}, {"orders", "o-6"}, {"payments", "p-1"}, // pending
		{"payments", "p-2"}, {"orders", "o-7"}, // dead
	} {
		e, err := txoutbox.NewEvent(spec[0], "order", spec[1], "order.placed", map[string]any{"order": spec[1], "n": i})
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	bg := context.Background()
	testkit.Commit(t, bg, db.SQL, w, events...)
	const deadErr = "kafka: Failed to produce message to topic payments: kafka server: Message was too large"
	for _, q := range []string{
		`UPDATE outbox SET state = 'published', published_at = now() WHERE id <= 3`,
		`UPDATE outbox SET state = 'dead', attempts = 10, last_error = '` + deadErr + `' WHERE id = 8`,
		`UPDATE outbox SET state = 'dead', attempts = 10, last_error = 'kafka: client has run out of available brokers' WHERE id = 9`,
	} {
		if _, err := db.SQL.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	adm, err := outboxadmin.New(db.SQL, outboxadmin.Config{Table: db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	base := serve(t, adm, console.Options{AllowWrites: true, Title: "orders (test)", Logger: logger, SampleEvery: time.Second})
	readOnly := serve(t, adm, console.Options{Title: "orders (read-only)", Logger: logger})

	count := func(q string) string {
		t.Helper()
		var n int64
		if err := db.SQL.QueryRow(q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return strconv.FormatInt(n, 10)
	}
	state := func(id int) string {
		t.Helper()
		var s string
		if err := db.SQL.QueryRow(`SELECT state FROM outbox WHERE id = $1`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	// Overview: the numbers are the database's, and the script has drawn
	// the chart from the JSON endpoint.
	do(t, ctx, "overview",
		chromedp.Navigate(base),
		chromedp.WaitVisible(`#chart svg polyline.backlog`),
	)
	backlog, dead, mode, payments := text(t, ctx, `#backlog`), text(t, ctx, `#dead`), text(t, ctx, `#mode`), text(t, ctx, `#topics tbody tr:nth-child(2)`)
	if want := count(`SELECT count(*) FROM outbox WHERE state IN ('pending', 'claimed')`); backlog != want {
		t.Errorf("overview backlog %q, database %s", backlog, want)
	}
	if want := count(`SELECT count(*) FROM outbox WHERE state = 'dead'`); dead != want {
		t.Errorf("overview dead %q, database %s", dead, want)
	}
	if mode != "writes allowed" {
		t.Errorf("mode %q, want writes allowed", mode)
	}
	if f := strings.Fields(payments); len(f) != 5 || f[0] != "payments" || f[1] != count(`SELECT count(*) FROM outbox WHERE topic = 'payments' AND state = 'pending'`) || f[3] != "1" {
		t.Errorf("payments row %q", payments)
	}
	// A few samples (one a second here) draw a line.
	do(t, ctx, "chart", chromedp.Sleep(3*time.Second), chromedp.WaitVisible(`#chart svg polyline.lag`))
	screenshot(t, ctx, "console-overview")

	// Dead letters: the list, then the detail of the payments one.
	do(t, ctx, "dead letters", chromedp.Navigate(base+"dead"))
	total := text(t, ctx, `#dead-total`)
	if !strings.HasPrefix(total, "2 dead event(s) match") {
		t.Errorf("dead letters: %q", total)
	}
	screenshot(t, ctx, "console-dead-letters")
	do(t, ctx, "dead event detail",
		chromedp.Click(`#dead-list a[href$="events/8"]`, chromedp.NodeVisible),
		chromedp.WaitVisible(`#last-error`),
	)
	lastErr := text(t, ctx, `#last-error`)
	if lastErr != deadErr {
		t.Errorf("detail shows last error %q, want %q", lastErr, deadErr)
	}
	screenshot(t, ctx, "console-dead-event")

	// A POST without the CSRF token, from the page itself, is refused.
	status := get(t, ctx, "POST without CSRF", chromedp.Evaluate[int](
		`fetch("../dead/retry", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: "ids=9"}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if status != http.StatusForbidden || state(9) != "dead" {
		t.Errorf("POST without CSRF = %d, row 9 %s; want 403 and dead", status, state(9))
	}

	// Retry: preview, confirm; the row is pending again.
	do(t, ctx, "retry",
		chromedp.Click(`#retry`, chromedp.NodeVisible),
		chromedp.WaitVisible(`#confirm`),
		chromedp.Click(`#confirm`, chromedp.NodeVisible),
		chromedp.WaitVisible(`#done`),
	)
	done := text(t, ctx, `#done`)
	if !strings.HasPrefix(done, "1 event(s) are pending again") || state(8) != "pending" {
		t.Fatalf("after Retry: %q, row 8 %s", done, state(8))
	}

	// A running relay publishes it.
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 16}, watermill.NopLogger{})
	defer pubsub.Close()
	msgs, err := pubsub.Subscribe(bg, "payments")
	if err != nil {
		t.Fatal(err)
	}
	// Other topics' messages go to no subscriber and are dropped.
	r, err := relay.New(db.SQL, pubsub, relay.Config{Table: db.Table(), PollInterval: 50 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRelay := context.WithCancel(bg)
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(rctx) }()
	defer func() {
		stopRelay()
		if err := <-relayDone; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	got := map[string]bool{}
	deadline := time.After(20 * time.Second)
	for !got[events[7].ID.String()] {
		select {
		case m := <-msgs:
			got[m.UUID] = true
			m.Ack()
		case <-deadline:
			t.Fatalf("the retried event was not published; got %v", got)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "row 8 published", func() bool { return state(8) == "published" })

	// The relays page shows the relay and its shards.
	// The pages share a status read once a SampleEvery (1s here): the
	// relay shows within one.
	var relays string
	testkit.WaitFor(t, 10*time.Second, "the relay on the relays page", func() bool {
		do(t, ctx, "relays", chromedp.Navigate(base+"relays"))
		relays = text(t, ctx, `#relay-list tbody`)
		return strings.Contains(relays, "alive")
	})
	if !strings.Contains(relays, "256") {
		t.Errorf("relays page: %q", relays)
	}
	screenshot(t, ctx, "console-relays")

	// Read-only: the preview offers no confirmation, and a POST with a
	// valid token is refused.
	do(t, ctx, "read-only preview", chromedp.Navigate(readOnly+"dead/confirm?action=retry&ids=9"))
	mode, note := text(t, ctx, `#mode`), text(t, ctx, `#readonly-note`)
	forms := get(t, ctx, "forms", chromedp.Evaluate[int](`document.querySelectorAll("#confirm-form").length`))
	status = get(t, ctx, "read-only POST", chromedp.Evaluate[int](
		`fetch("retry", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
			body: "ids=9&csrf=" + encodeURIComponent(document.querySelector('meta[name="csrf-token"]').content)}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if mode != "read-only" || !strings.Contains(note, "read-only") || forms != 0 {
		t.Errorf("read-only preview: mode %q, note %q, %d forms", mode, note, forms)
	}
	if status != http.StatusForbidden || state(9) != "dead" {
		t.Errorf("read-only POST = %d, row 9 %s; want 403 and dead", status, state(9))
	}
}

// testWriter sends the console's and relay's logs to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
