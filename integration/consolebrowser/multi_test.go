package consolebrowser

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin"
	"github.com/txoutbox/txoutbox/outboxadmin/console"
)

// seed writes n events to db's outbox, row 1 dead, the others pending.
func seed(t *testing.T, db *testkit.DB, n int) {
	t.Helper()
	var events []txoutbox.Event
	for i := range n {
		e, err := txoutbox.NewEvent("orders", "order", "o-"+string(rune('a'+i)), "order.placed", map[string]any{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	testkit.Commit(t, context.Background(), db.SQL, testkit.NewWriter(t, db.Table()), events...)
	if _, err := db.SQL.Exec(`UPDATE outbox SET state = 'dead', attempts = 10, last_error = 'refused' WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
}

// The console of many tables: the index, one table's overview (its chart
// drawn from its own JSON under the table's prefix), and a retry that
// changes that table's row only, though the other's row 1 is dead too.
func TestMultiInABrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	a, b := testkit.NewOutbox(t), testkit.NewOutbox(t)
	seed(t, a, 3) // 2 pending, 1 dead
	seed(t, b, 1) // 1 dead
	list := func(context.Context) ([]txoutbox.Table, error) { return []txoutbox.Table{a.Table(), b.Table()}, nil }
	m, err := console.NewMulti(a.SQL, outboxadmin.Config{}, list, console.Options{AllowWrites: true, Title: "tenants (test)",
		SampleEvery: time.Second, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	base := mount(t, m)
	state := func(db *testkit.DB) string {
		t.Helper()
		var s string
		if err := db.SQL.QueryRow(`SELECT state FROM outbox WHERE id = 1`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	nameA, nameB := a.Schema+".outbox", b.Schema+".outbox"

	do(t, ctx, "index", chromedp.Navigate(base), chromedp.WaitVisible(`#tables`))
	rowA := text(t, ctx, `#tables tr[data-table="`+nameA+`"]`)
	rowB := text(t, ctx, `#tables tr[data-table="`+nameB+`"]`)
	if f := strings.Fields(rowA); len(f) != 4 || f[1] != "2" || f[3] != "1" {
		t.Errorf("index row of a: %q", rowA)
	}
	if f := strings.Fields(rowB); len(f) != 4 || f[1] != "0" || f[3] != "1" {
		t.Errorf("index row of b: %q", rowB)
	}
	screenshot(t, ctx, "console-tables")

	do(t, ctx, "a's overview",
		chromedp.Click(`#tables a[href$="tables/`+nameA+`/"]`, chromedp.NodeVisible),
		chromedp.WaitVisible(`#chart svg polyline.backlog`),
	)
	if got, name := text(t, ctx, `#backlog`), text(t, ctx, `#table-name`); got != "2" || name != nameA {
		t.Errorf("a's overview: backlog %q, table %q", got, name)
	}
	do(t, ctx, "a's dead letters",
		chromedp.Click(`nav a[href$="dead"]`, chromedp.NodeVisible),
		chromedp.Click(`#dead-list a[href$="events/1"]`, chromedp.NodeVisible),
		chromedp.Click(`#retry`, chromedp.NodeVisible),
		chromedp.WaitVisible(`#confirm`),
		chromedp.Click(`#confirm`, chromedp.NodeVisible),
		chromedp.WaitVisible(`#done`),
	)
	if done := text(t, ctx, `#done`); !strings.HasPrefix(done, "1 event(s) are pending again") {
		t.Errorf("after Retry: %q", done)
	}
	if state(a) != "pending" || state(b) != "dead" {
		t.Errorf("after a's retry: a's row 1 %s, b's %s; want pending and dead", state(a), state(b))
	}
	do(t, ctx, "back to the index", chromedp.Click(`#all-tables`, chromedp.NodeVisible), chromedp.WaitVisible(`#tables`))
	if got := text(t, ctx, `#table-count`); !strings.HasPrefix(got, "2 table(s)") {
		t.Errorf("index after the retry: %q", got)
	}
}
