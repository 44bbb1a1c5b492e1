package relaye2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// bundle is what most relay tests need.
type bundle struct {
	db      *testkit.DB
	brokers []string
	writer  *txoutbox.Writer
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := testkit.NewOutbox(t)
	kafka := kafkatest.New(t)
	return &bundle{db: db, brokers: kafka.ListenAddrs(), writer: testkit.NewWriter(t, db.Table())}
}

// fastConfig shortens every interval so tests run in seconds.
func (b *bundle) fastConfig() relay.Config {
	return relay.Config{
		Table:             b.db.Table(),
		PollInterval:      50 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
		StaleAfter:        3 * time.Second, // a heartbeat may stall for seconds on a loaded CI machine
		// Longer than a publish takes here even on a loaded 2-core
		// machine: with 2s, rows waiting in the lanes outlived their
		// lease there, the relay claimed them again and the tests timed
		// out on the churn. Takeover in these tests goes by StaleAfter;
		// lease expiry has tests of its own (package relay, the crash
		// suite).
		LeaseDuration: 10 * time.Second,
		BackoffMin:    20 * time.Millisecond,
		BackoffMax:    200 * time.Millisecond,
		StatsInterval: 100 * time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func (b *bundle) kafkaPublisher(t *testing.T, cfg kafkapub.Config) message.Publisher {
	t.Helper()
	pub, err := kafkapub.NewPublisher(b.brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return pub
}

// written is an event as the database committed it.
type written struct {
	id        string
	aggregate string
	seq       int
}

// write commits n events spread round-robin over aggregates, in
// transactions of up to 100 events, and returns them in write order.
func (b *bundle) write(t *testing.T, topic string, n, aggregates int) []written {
	t.Helper()
	ctx := context.Background()
	var out []written
	for start := 0; start < n; start += 100 {
		var events []txoutbox.Event
		for i := start; i < min(start+100, n); i++ {
			agg := fmt.Sprintf("agg-%d", i%aggregates)
			e, err := txoutbox.NewEvent(topic, "order", agg, "order.changed", map[string]int{"seq": i})
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, e)
			out = append(out, written{id: e.ID.String(), aggregate: agg, seq: i})
		}
		testkit.Commit(t, ctx, b.db.SQL, b.writer, events...)
	}
	return out
}

// runRelay runs a relay until the test ends or stop is called; stop waits
// for Run to return.
func runRelay(t *testing.T, db *testkit.DB, pub message.Publisher, cfg relay.Config) (r *relay.Relay, stop func()) {
	t.Helper()
	r, err := relay.New(db.SQL, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("Run did not return within 30s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return r, stop
}

// delivered is one record read back from the broker.
type delivered struct {
	key, eventID string
	partition    int32
	offset       int64
}

// consume reads topic from the start with an independent franz-go client
// until it holds want distinct event ids or the timeout passes.
func consume(t *testing.T, brokers []string, topic string, want int, timeout time.Duration) []delivered {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []delivered
	seen := map[string]bool{}
	err := kafkatest.Consume(ctx, brokers, []string{topic}, 0, func(rec *kgo.Record) bool {
		d := delivered{key: string(rec.Key), partition: rec.Partition, offset: rec.Offset,
			eventID: kafkatest.Header(rec, txoutbox.HeaderEventID)}
		seen[d.eventID] = true
		out = append(out, d)
		return len(seen) < want
	})
	if err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	return out
}

// check compares what the broker holds with what was written: every event
// delivered, none unknown, and the first delivery of each aggregate's
// events in write order. It returns the number of duplicates.
func check(t *testing.T, want []written, got []delivered) (duplicates int) {
	t.Helper()
	byID := map[string]written{}
	for _, w := range want {
		byID[w.id] = w
	}
	first := map[string]bool{}
	lastSeq := map[string]int{}
	violations := 0
	for _, d := range got {
		w, ok := byID[d.eventID]
		if !ok {
			t.Errorf("phantom: delivered event %s was never written", d.eventID)
			continue
		}
		if d.key != w.aggregate {
			t.Errorf("event %s has key %q, want aggregate id %q", d.eventID, d.key, w.aggregate)
		}
		if first[d.eventID] {
			duplicates++
			continue
		}
		first[d.eventID] = true
		if prev, ok := lastSeq[w.aggregate]; ok && w.seq < prev {
			violations++
			if violations <= 5 {
				t.Logf("order violation: aggregate %s: seq %d delivered after %d", w.aggregate, w.seq, prev)
			}
		}
		lastSeq[w.aggregate] = w.seq
	}
	lost := 0
	for _, w := range want {
		if !first[w.id] {
			lost++
		}
	}
	if lost > 0 || violations > 0 {
		t.Fatalf("lost=%d order_violations=%d (delivered %d records for %d events)", lost, violations, len(got), len(want))
	}
	return duplicates
}

// claimSQL is in the relay's claim statement, and in no other: a traced
// pool (testkit.DB.Traced) counts claims by it.
const claimSQL = "SET lease_owner = $1, lease_expires_at"

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, timeout, what, cond)
}

// requireNone stops the test when the count query finds any row; what
// says, after their number, what those rows are.
func requireNone(t *testing.T, db *testkit.DB, query, what string) {
	t.Helper()
	if n := count(t, db, query); n != 0 {
		t.Fatalf("%d %s", n, what)
	}
}

func count(t *testing.T, db *testkit.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.SQL.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
