package main

import (
	"context"
	"fmt"
	"github.com/txoutbox/txoutbox"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// startRelay runs a relay on the outbox, publishing to a fresh kfake broker,
// until the test ends, and returns the broker addresses.
func (e *opsEnv) startRelay(t *testing.T) []string {
	t.Helper()
	brokers := kafkatest.New(t).ListenAddrs()
	pub, err := kafkapub.NewPublisher(brokers, kafkapub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(e.db.SQL, pub, relay.Config{
		Table:             e.db.Table(),
		PollInterval:      50 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
		StaleAfter:        time.Second,
		LeaseDuration:     2 * time.Second,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay Run: %v", err)
		}
		pub.Close()
	})
	return brokers
}

// record is one Kafka record read back: its key and event id header.
type record struct{ key, eventID string }

// readTopic reads topic from the start until it holds n records.
func readTopic(t *testing.T, brokers []string, topic string, n int) []record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []record
	err := kafkatest.Consume(ctx, brokers, []string{topic}, 0, func(r *kgo.Record) bool {
		out = append(out, record{key: string(r.Key), eventID: kafkatest.Header(r, txoutbox.HeaderEventID)})
		return len(out) < n
	})
	if err != nil {
		t.Fatalf("read %d records of %s, want %d: %v: %v", len(out), topic, n, err, out)
	}
	return out
}

// The ordering case: a dead event, then two later pending events of
// its aggregate; after a retry the broker receives all three in id order.
func TestDeadRetryKeepsAggregateOrder(t *testing.T) {
	t.Parallel()
	e := newOps(t)
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
}

func TestReplay(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	_, a1 := e.write(t, "orders", "o-1", "order.placed")
	_, b1 := e.write(t, "orders", "o-2", "order.placed")
	_, a2 := e.write(t, "orders", "o-1", "order.paid")
	brokers := e.startRelay(t)
	readTopic(t, brokers, "orders", 3)
	waitPublished := func(n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var c int
			if err := e.db.SQL.QueryRow(`SELECT count(*) FROM outbox WHERE state = 'published'`).Scan(&c); err != nil {
				t.Fatal(err)
			}
			if c == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d rows published after 20s, want %d", c, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitPublished(3)
	// One event was published long ago: outside the replay.
	e.exec(t, `UPDATE outbox SET published_at = now() - interval '2 days' WHERE event_id = $1`, b1)

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
}

func TestOpsUsageErrors(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	d, _ := e.write(t, "orders", "o-1", "order.placed")
	e.kill(t, d)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"status", "--max-lag", "soon"}, `invalid value "soon" for flag -max-lag`},
		{[]string{"status", "--max-lag", "-1s"}, "--max-lag is negative"},
		{[]string{"status", "--stale-after", "-1s"}, "--stale-after is negative"},
		{[]string{"status", "--table", "x; drop table y"}, "invalid table name"},
		{[]string{"dead"}, "want a subcommand: list, show, retry or drop"},
		{[]string{"dead", "resurrect"}, `unknown subcommand "resurrect"`},
		{[]string{"dead", "list", "--since", "yesterday"}, "want a duration ago (90m, 24h) or an RFC 3339 time"},
		{[]string{"dead", "list", "--since", "-1h"}, "negative duration"},
		{[]string{"dead", "list", "--limit", "0"}, "--limit 0 is outside 1..10000"},
		{[]string{"dead", "list", "--after", "x"}, `invalid value "x" for flag -after`},
		{[]string{"dead", "list", "--state", "dead"}, "flag provided but not defined: -state"},
		{[]string{"dead", "show"}, "want one event ID, got 0 arguments"},
		{[]string{"dead", "show", "abc"}, `bad event ID "abc"`},
		{[]string{"dead", "show", "1", "2"}, "want one event ID, got 2 arguments"},
		{[]string{"dead", "retry"}, "say which events: give IDs, a filter"},
		{[]string{"dead", "retry", "0"}, `bad event ID "0"`},
		{[]string{"dead", "retry", fmt.Sprint(d), "x"}, `bad event ID "x"`},
		{[]string{"dead", "retry", "--all", fmt.Sprint(d)}, "--all cannot be combined with IDs or filters"},
		{[]string{"dead", "retry", "--colour", "red"}, "flag provided but not defined: -colour"},
		{[]string{"dead", "drop", fmt.Sprint(d)}, "pass --yes"},
		{[]string{"dead", "drop", "--all"}, "pass --yes"},
		{[]string{"replay"}, "--since is required"},
		{[]string{"replay", "--since", "last tuesday"}, "want a duration ago"},
		{[]string{"replay", "--since", "1h", "extra"}, "unexpected arguments"},
	} {
		code, _, errOut := e.run(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.msg) {
			t.Errorf("outbox %v = exit %d, stderr %q; want exit 2 mentioning %q", tc.args, code, errOut, tc.msg)
		}
	}
	// Nothing was touched.
	if s, n := e.state(t, d); s != "dead" || n != 10 {
		t.Errorf("after refused commands the dead row is %s/%d", s, n)
	}
}
