package consolebrowser

import (
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin"
	"github.com/txoutbox/txoutbox/outboxadmin/console"
)

// In a real browser: malformed and hostile dead rows show escaped and
// within the window, and a DNS rebinding (the attacker's name resolving to
// the console's loopback address) reads nothing.
func TestHostileRowsAndRebindingInABrowser(t *testing.T) {
	t.Parallel()
	const rebound = "rebind.attacker.example"
	ctx := browser(t, chromedp.Flag("host-resolver-rules", "MAP "+rebound+" 127.0.0.1"))
	db := testkit.NewOutbox(t)
	ids := testkit.SeedHostile(t, db)
	adm, err := outboxadmin.New(db.SQL, outboxadmin.Config{Table: db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	base := serve(t, adm, console.Options{AllowWrites: true, Logger: logger})

	// A 100 KB topic is cut in the overview, which stays as wide as the
	// window; a U+202E shows as \u202e and reverses nothing.
	do(t, ctx, "overview", chromedp.Navigate(base), chromedp.WaitVisible(`#chart svg`))
	if w := get(t, ctx, "page width", chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); w > 1400 {
		t.Errorf("the overview is %d px wide in a 1280 px window", w)
	}
	topics := text(t, ctx, `#topics tbody`)
	if strings.ContainsRune(topics, 0x202e) || strings.ContainsRune(topics, 0x1b) || !strings.Contains(topics, `abc\u202etxt.exe`) {
		t.Errorf("overview topics: %q", topics)
	}

	do(t, ctx, "dead letters", chromedp.Navigate(base+"dead?limit=500"))
	list := text(t, ctx, `#dead-list tbody`)
	if i, near := testkit.Unsafe(list); i >= 0 || !strings.Contains(list, `t\x1b[2Jabc\u202etxt.exe`) {
		t.Errorf("dead list shows a raw control or bidi character (%q), or not the escaped topic", near)
	}
	if w := get(t, ctx, "page width", chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); w > 1400 {
		t.Errorf("the dead list is %d px wide", w)
	}

	nested := strconv.FormatInt(ids["headers-nested"], 10)
	do(t, ctx, "malformed headers", chromedp.Navigate(base+"events/"+nested), chromedp.WaitVisible(`#headers-error`))
	if raw := text(t, ctx, `#raw-headers`); !strings.Contains(raw, `"nested"`) {
		t.Errorf("raw headers shown: %q", raw)
	}

	// The rebound name reaches the same server; the console refuses it.
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = rebound + ":" + u.Port()
	do(t, ctx, "rebound", chromedp.Navigate(u.String()+"events/"+nested))
	body := get(t, ctx, "rebound page", chromedp.Evaluate[string](`document.body.innerText`))
	if !strings.Contains(body, "does not serve the host") || strings.Contains(body, "nested") {
		t.Errorf("under a rebound name the console answered:\n%.500s", body)
	}
}
