package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

type deadPage struct {
	Events    []rowOutput `json:"events"`
	NextAfter *int64      `json:"next_after"`
}

func compact(t *testing.T, raw []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("payload %q: %v", raw, err)
	}
	return b.String()
}

func ids(rows []rowOutput) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func TestDeadListAndShow(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, engine testkit.Engine) {
		e := newOpsOn(t, engine)
		a1 := e.writeDead(t, "orders", "o-1", "order.placed")
		a2 := e.writeDead(t, "orders", "o-2", "order.cancelled")
		b1 := e.writeDead(t, "payments", "o-1", "payment.failed")
		old := e.writeDead(t, "orders", "o-3", "order.placed")
		alive, _ := e.write(t, "orders", "o-1", "order.placed") // pending, never listed
		e.exec(t, `UPDATE outbox SET created_at = $1 WHERE id = $2`, time.Now().UTC().Add(-72*time.Hour), old)

		for _, tc := range []struct {
			args []string
			want []int64
		}{
			{nil, []int64{a1, a2, b1, old}},
			{[]string{"--topic", "orders"}, []int64{a1, a2, old}},
			{[]string{"--aggregate", "o-1"}, []int64{a1, b1}},
			{[]string{"--type", "order.placed"}, []int64{a1, old}},
			{[]string{"--since", "24h"}, []int64{a1, a2, b1}},
			{[]string{"--since", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}, []int64{a1, a2, b1}},
			{[]string{"--topic", "orders", "--aggregate", "o-1"}, []int64{a1}},
			{[]string{"--topic", "nope"}, []int64{}},
		} {
			var page deadPage
			e.runJSON(t, &page, append([]string{"dead", "list"}, tc.args...)...)
			if fmt.Sprint(ids(page.Events)) != fmt.Sprint(tc.want) || page.NextAfter != nil {
				t.Errorf("dead list %v = %v (next %v), want %v", tc.args, ids(page.Events), page.NextAfter, tc.want)
			}
		}

		// Keyset paging.
		var p1, p2, p3 deadPage
		e.runJSON(t, &p1, "dead", "list", "--limit", "2")
		if fmt.Sprint(ids(p1.Events)) != fmt.Sprint([]int64{a1, a2}) || p1.NextAfter == nil || *p1.NextAfter != a2 {
			t.Fatalf("page 1 = %v next %v", ids(p1.Events), p1.NextAfter)
		}
		e.runJSON(t, &p2, "dead", "list", "--limit", "2", "--after", fmt.Sprint(*p1.NextAfter))
		if fmt.Sprint(ids(p2.Events)) != fmt.Sprint([]int64{b1, old}) || p2.NextAfter == nil {
			t.Fatalf("page 2 = %v next %v", ids(p2.Events), p2.NextAfter)
		}
		e.runJSON(t, &p3, "dead", "list", "--limit", "2", "--after", fmt.Sprint(*p2.NextAfter))
		if len(p3.Events) != 0 || p3.NextAfter != nil {
			t.Fatalf("page 3 = %v next %v", ids(p3.Events), p3.NextAfter)
		}

		code, out, _ := e.run(t, "dead", "list", "--limit", "3")
		flat := strings.Join(strings.Fields(out), " ")
		if code != 0 || !strings.Contains(flat, fmt.Sprintf("%d orders o-1 order.placed", a1)) ||
			!strings.Contains(flat, "10 publish: broker said no") || !strings.Contains(out, fmt.Sprintf("more: add --after %d", b1)) {
			t.Errorf("dead list: exit %d\n%s", code, out)
		}

		// Show: payload, headers, attempts and last error.
		var row rowOutput
		e.runJSON(t, &row, "dead", "show", fmt.Sprint(a1))
		if row.State != "dead" || row.Attempts != 10 || row.LastError != "publish: broker said no" ||
			row.Headers["tenant"] != "acme" || compact(t, row.Payload) != `{"aggregate":"o-1"}` || row.PayloadBytes != 19 {
			t.Errorf("dead show --json = %+v (payload %s)", row, row.Payload)
		}
		code, out, _ = e.run(t, "dead", "show", fmt.Sprint(a1))
		for _, want := range []string{"state       dead", "attempts    10", "last error  publish: broker said no", "tenant",
			"payload (application/json, 19 bytes):\n{\n  \"aggregate\": \"o-1\"\n}"} {
			if !strings.Contains(out, want) {
				t.Errorf("dead show lacks %q:\n%s", want, out)
			}
		}
		if code != 0 {
			t.Errorf("dead show: exit %d", code)
		}
		// A row in another state shows too, with its state.
		e.runJSON(t, &row, "dead", "show", fmt.Sprint(alive))
		if row.State != "pending" {
			t.Errorf("show of a pending row: state %q", row.State)
		}
		code, _, errOut := e.run(t, "dead", "show", "999999")
		if code != 1 || !strings.Contains(errOut, "no such event: 999999") {
			t.Errorf("show of a missing id: exit %d, %q", code, errOut)
		}
	})
}

func TestDeadRetryAndDrop(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, engine testkit.Engine) {
		e := newOpsOn(t, engine)
		d1 := e.writeDead(t, "orders", "o-1", "order.placed")
		d2 := e.writeDead(t, "orders", "o-2", "order.placed")
		d3 := e.writeDead(t, "payments", "p-1", "payment.failed")
		pending, _ := e.write(t, "orders", "o-1", "order.shipped")

		// A dry run reports and changes nothing.
		code, out, _ := e.run(t, "dead", "retry", "--topic", "orders", "--dry-run")
		if code != 0 || !strings.Contains(out, "would retry 2 dead event(s)") || !strings.Contains(out, "dry run: nothing changed") {
			t.Errorf("retry --dry-run: exit %d\n%s", code, out)
		}
		if s, n := e.state(t, d1); s != "dead" || n != 10 {
			t.Fatalf("after a dry run d1 is %s/%d", s, n)
		}

		// An id that is not dead refuses the whole command: nothing changes.
		code, _, errOut := e.run(t, "dead", "retry", fmt.Sprint(d1), fmt.Sprint(pending), "999999")
		if code != 1 || !strings.Contains(errOut, fmt.Sprintf("not dead or no such event: %d, 999999", pending)) {
			t.Errorf("retry of a pending and a missing id: exit %d, %q", code, errOut)
		}
		if s, _ := e.state(t, d1); s != "dead" {
			t.Fatalf("a refused retry changed d1 to %s", s)
		}

		var retried struct {
			Retried []rowOutput `json:"retried"`
			DryRun  bool        `json:"dry_run"`
		}
		e.runJSON(t, &retried, "dead", "retry", fmt.Sprint(d1))
		if fmt.Sprint(ids(retried.Retried)) != fmt.Sprint([]int64{d1}) || retried.DryRun {
			t.Errorf("retry d1 = %+v", retried)
		}
		var shown rowOutput
		e.runJSON(t, &shown, "dead", "show", fmt.Sprint(d1))
		if due := !shown.NextAttemptAt.After(time.Now().Add(time.Second)); shown.State != "pending" || shown.Attempts != 0 || !due || shown.LastError != "publish: broker said no" {
			t.Errorf("retried d1: %s, attempts %d, next attempt %s, last_error %q; want pending, 0, due, kept", shown.State, shown.Attempts, shown.NextAttemptAt, shown.LastError)
		}
		// Retrying again: it is no longer dead.
		if code, _, errOut := e.run(t, "dead", "retry", fmt.Sprint(d1)); code != 1 || !strings.Contains(errOut, "not dead") {
			t.Errorf("second retry: exit %d, %q", code, errOut)
		}

		// Drop needs --yes; --dry-run shows what would go.
		code, _, errOut = e.run(t, "dead", "drop", fmt.Sprint(d2))
		if code != 2 || !strings.Contains(errOut, "pass --yes") {
			t.Errorf("drop without --yes: exit %d, %q", code, errOut)
		}
		code, out, _ = e.run(t, "dead", "drop", "--all", "--dry-run")
		if code != 0 || !strings.Contains(out, "would drop 2 dead event(s)") {
			t.Errorf("drop --all --dry-run: exit %d\n%s", code, out)
		}
		if s, _ := e.state(t, d2); s != "dead" {
			t.Fatalf("dry run dropped d2")
		}
		// The pending row matches the filter but is not dead: untouched.
		code, out, _ = e.run(t, "dead", "drop", "--aggregate", "o-2", "--yes")
		if code != 0 || !strings.Contains(out, "dropped 1 dead event(s)") || !strings.Contains(out, fmt.Sprint(d2)) {
			t.Errorf("drop --aggregate o-2 --yes: exit %d\n%s", code, out)
		}
		var dropped struct {
			Dropped []rowOutput `json:"dropped"`
		}
		e.runJSON(t, &dropped, "dead", "drop", "--all", "--yes")
		if fmt.Sprint(ids(dropped.Dropped)) != fmt.Sprint([]int64{d3}) {
			t.Errorf("drop --all = %v, want [%d]", ids(dropped.Dropped), d3)
		}
		for id, want := range map[int64]string{d1: "pending", d2: "gone", d3: "gone", pending: "pending"} {
			if s, _ := e.state(t, id); s != want {
				t.Errorf("row %d is %s, want %s", id, s, want)
			}
		}
	})
}

// A retry reports later events of the aggregate that a relay already holds:
// they are in flight and may overtake the retried event.
func TestDeadRetryReportsInFlightEvents(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, engine testkit.Engine) {
		e := newOpsOn(t, engine)
		dead := e.writeDead(t, "orders", "o-1", "order.placed")
		inFlight, _ := e.write(t, "orders", "o-1", "order.paid")
		e.write(t, "orders", "o-1", "order.shipped")
		e.exec(t, `UPDATE outbox SET lease_owner = $1, lease_expires_at = $2 WHERE id = $3`, engine.LeaseOwner("relay-a"), time.Now().UTC().Add(30*time.Second), inFlight)

		var res struct {
			Retried []rowOutput `json:"retried"`
		}
		e.runJSON(t, &res, "dead", "retry", fmt.Sprint(dead), "--dry-run")
		if len(res.Retried) != 1 || fmt.Sprint(res.Retried[0].Overtaken) != fmt.Sprint([]int64{inFlight}) {
			t.Fatalf("retry --dry-run = %+v, want overtaken_by [%d]", res.Retried, inFlight)
		}
		code, out, _ := e.run(t, "dead", "retry", fmt.Sprint(dead))
		if code != 0 || !strings.Contains(out, fmt.Sprintf("1 later event(s) of aggregate \"o-1\" were already in flight and may be published before %d: %d", dead, inFlight)) {
			t.Errorf("retry: exit %d\n%s", code, out)
		}
	})
}

// The ordering case: a dead event, then two later pending events of
// its aggregate; after a retry the broker receives all three in id order.
func TestDeadRetryKeepsAggregateOrder(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, engine testkit.Engine) {
		e := newOpsOn(t, engine)
		dead, first := e.write(t, "orders", "o-1", "order.placed")
		_, second := e.write(t, "orders", "o-1", "order.paid")
		_, third := e.write(t, "orders", "o-1", "order.shipped")
		e.kill(t, dead)

		if code, out, errOut := e.run(t, "dead", "retry", fmt.Sprint(dead)); code != 0 {
			t.Fatalf("retry: exit %d, %s %s", code, out, errOut)
		}
		brokers := e.startRelay(t)
		got := readTopic(t, brokers, "orders", 3)
		want := []record{{"o-1", first}, {"o-1", second}, {"o-1", third}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("broker received %v, want %v", got, want)
		}
	})
}

// dead show prints a large payload's first 4 KiB, with its size and how
// many bytes it cut, and --full the whole; a binary one as a hex dump of
// its start. A 10 MB payload printed whole (a binary one as 30 MB of hex)
// buried the rest of the event off the screen.
func TestDeadShowCutsLargePayloads(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	var big strings.Builder
	big.WriteString(`{"order":"o-1","lines":[`)
	for i := 0; big.Len() < 10<<20; i++ {
		fmt.Fprintf(&big, `{"sku":"s-%07d","qty":1},`, i)
	}
	big.WriteString(`{"sku":"last","qty":1}]}`)
	binary := make([]byte, 1<<20)
	for i := range binary {
		binary[i] = byte(i)
	}
	jsonID := e.writeDead(t, "orders", "o-1", "order.placed")
	binID := e.writeDead(t, "orders", "o-2", "order.placed")
	e.exec(t, `UPDATE outbox SET payload = $2 WHERE id = $1`, jsonID, []byte(big.String()))
	e.exec(t, `UPDATE outbox SET payload = $2, content_type = 'application/octet-stream' WHERE id = $1`, binID, binary)

	const bound = 64 << 10 // the event and 4 KiB of payload, indented or dumped
	for _, tc := range []struct {
		name        string
		id          int64
		size        int
		start, last string // the payload's start as shown, and its end as --full shows it
	}{
		{"json", jsonID, big.Len(), "{\n  \"order\": \"o-1\",\n  \"lines\": [\n    {\n      \"sku\": \"s-0000000\",",
			`{"sku":"last","qty":1}]}`}, // compact: indented it would pass 1 MiB
		{"binary", binID, len(binary), "00000000  00 01 02 03 04 05 06 07  08 09 0a 0b 0c 0d 0e 0f  |................|",
			fmt.Sprintf("%08x  f0 f1 f2", len(binary)-16)},
	} {
		code, out, errOut := e.run(t, "dead", "show", fmt.Sprint(tc.id))
		if code != 0 {
			t.Fatalf("%s: dead show: exit %d, %s", tc.name, code, errOut)
		}
		if len(out) > bound {
			t.Errorf("%s: dead show printed %d bytes of a %d-byte payload, over %d", tc.name, len(out), tc.size, bound)
		}
		for _, want := range []string{
			fmt.Sprintf("%d bytes", tc.size), tc.start,
			fmt.Sprintf("(payload cut: %d of %d bytes not shown; --full prints it whole, --json as JSON or base64)", tc.size-4096, tc.size),
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: dead show lacks %q:\n%.2000s", tc.name, want, out)
			}
		}
		if tc.name == "binary" && !strings.Contains(out, "binary, the first 4096 shown") {
			t.Errorf("binary: dead show does not say the payload is dumped and cut:\n%.500s", out)
		}
		code, out, errOut = e.run(t, "dead", "show", "--full", fmt.Sprint(tc.id))
		if code != 0 || !strings.Contains(out, tc.last) || strings.Contains(out, "payload cut") {
			t.Errorf("%s: dead show --full: exit %d, %s; want the whole payload, to %q (%d bytes of output)", tc.name, code, errOut, tc.last, len(out))
		}
	}
}
