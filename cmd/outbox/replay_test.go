package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

func TestReplay(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, engine testkit.Engine) {
		e := newOpsOn(t, engine)
		_, a1 := e.write(t, "orders", "o-1", "order.placed")
		_, b1 := e.write(t, "orders", "o-2", "order.placed")
		_, a2 := e.write(t, "orders", "o-1", "order.paid")
		brokers := e.startRelay(t)
		readTopic(t, brokers, "orders", 3)
		waitPublished := func(n int) {
			t.Helper()
			var c int
			if !testkit.Eventually(20*time.Second, func() bool {
				if err := e.db.SQL.QueryRow(`SELECT count(*) FROM outbox WHERE state = 'published'`).Scan(&c); err != nil {
					t.Fatal(err)
				}
				return c == n
			}) {
				t.Fatalf("%d rows published after 20s, want %d", c, n)
			}
		}
		waitPublished(3)
		// One event was published long ago: outside the replay.
		e.exec(t, `UPDATE outbox SET published_at = $1 WHERE event_id = $2`, time.Now().UTC().Add(-48*time.Hour), b1)

		code, out, _ := e.run(t, "replay", "--since", "1h", "--dry-run")
		if code != 0 || !strings.Contains(out, "would replay 2 event(s)") || !strings.Contains(out, "orders: 2") {
			t.Fatalf("replay --dry-run: exit %d\n%s", code, out)
		}
		var none struct {
			Replayed int64 `json:"replayed"`
		}
		e.runJSON(t, &none, "replay", "--since", "1h", "--topic", "payments")
		if none.Replayed != 0 {
			t.Fatalf("replay of another topic replayed %d", none.Replayed)
		}

		code, out, errOut := e.run(t, "replay", "--since", "1h", "--aggregate", "o-1")
		if code != 0 || !strings.Contains(out, "replayed 2 event(s)") {
			t.Fatalf("replay: exit %d\n%s%s", code, out, errOut)
		}
		// The relay publishes them again, in order, with their original ids.
		// Order holds per key (partition), so look at o-1's records alone.
		var got []record
		for _, r := range readTopic(t, brokers, "orders", 5) {
			if r.key == "o-1" {
				got = append(got, r)
			}
		}
		want := []record{{"o-1", a1}, {"o-1", a2}, {"o-1", a1}, {"o-1", a2}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("o-1's records %v, want %v", got, want)
		}
		waitPublished(3)
	})
}
