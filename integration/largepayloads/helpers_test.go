package largepayloads

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/claimcheck"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
	"github.com/txoutbox/txoutbox/relay/walrelay"
)

// maxRecord is the producer's limit in these tests: events of largeSize
// pass it and go through the claim check (threshold 3/4 of it), the
// small ones do not.
const (
	maxRecord = 64 << 10
	largeSize = 200 << 10
	smallSize = 100
)

// written is an event as committed: its aggregate, its sequence in the
// aggregate and its payload.
type written struct {
	id        string
	aggregate string
	seq       int
	payload   []byte
	large     bool
}

// writeMixed commits, for each of aggregates, n events alternating
// large and small (large first), one transaction per round, and returns
// them in write order.
func writeMixed(t *testing.T, db *testkit.DB, topic string, aggregates, n int) []written {
	t.Helper()
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: db.Table(), MaxPayloadBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var out []written
	for seq := range n {
		var events []txoutbox.Event
		for a := range aggregates {
			agg := fmt.Sprintf("agg-%d", a)
			size := smallSize
			if seq%2 == 0 {
				size = largeSize
			}
			body := fmt.Sprintf(`{"seq":%d,"agg":%q,"fill":%q}`, seq, agg, strings.Repeat(string(rune('a'+a%26)), size))
			e, err := txoutbox.NewEvent(topic, "doc", agg, "doc.changed", rawJSON(body))
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, e)
			out = append(out, written{id: e.ID.String(), aggregate: agg, seq: seq, payload: e.Payload, large: size == largeSize})
		}
		testkit.Commit(t, context.Background(), db.SQL, w, events...)
	}
	return out
}

type rawJSON string

func (r rawJSON) MarshalJSON() ([]byte, error) { return []byte(r), nil }

// fileStore opens a claim check store on a fresh directory.
func fileStore(t *testing.T) (*claimcheck.Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := claimcheck.Open(context.Background(), "file://"+dir, claimcheck.Config{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

// objects counts the payload objects under dir (not fileblob's .attrs).
func objects(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".attrs") {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func publisher(t *testing.T, brokers []string) *kafkapub.Publisher {
	t.Helper()
	pub, err := kafkapub.NewPublisher(brokers, kafkapub.Config{MaxMessageBytes: maxRecord})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return pub
}

func fastConfig(db *testkit.DB, store relay.LargePayloads) relay.Config {
	return relay.Config{
		Table:             db.Table(),
		PollInterval:      50 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
		StaleAfter:        3 * time.Second,
		LeaseDuration:     10 * time.Second,
		BackoffMin:        20 * time.Millisecond,
		BackoffMax:        200 * time.Millisecond,
		OutageBackoffMax:  200 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		LargePayloads:     relay.LargePayloadsConfig{Store: store},
	}
}

// runRelay runs a polling relay until the test ends.
func runRelay(t *testing.T, db *testkit.DB, pub message.Publisher, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(db.SQL, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	return r
}

// received is a record as a consumer gets it, its payload fetched back
// through the store when it is a reference.
type received struct {
	id, aggregate string
	payload       []byte
	reference     bool
}

// consume reads topic until it holds want records, resolving references
// through store as a plain Kafka consumer would, by the headers.
func consume(t *testing.T, brokers []string, topic string, store *claimcheck.Store, want int) []received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []received
	err := kafkatest.Consume(ctx, brokers, []string{topic}, 0, func(r *kgo.Record) bool {
		md := map[string]string{}
		for _, h := range r.Headers {
			md[h.Key] = string(h.Value)
		}
		got := received{id: md[txoutbox.HeaderEventID], aggregate: string(r.Key), payload: r.Value, reference: claimcheck.IsReference(md)}
		if got.reference {
			if r.Value == nil || len(r.Value) != 0 {
				t.Errorf("reference %s has value %v, want empty and not null (no tombstone)", got.id, r.Value)
			}
			data, err := store.Fetch(ctx, md)
			if err != nil {
				t.Errorf("fetch %s: %v", got.id, err)
			}
			got.payload = data
		}
		out = append(out, got)
		return len(out) < want
	})
	if err != nil {
		t.Fatalf("consumed %d of %d records: %v", len(out), want, err)
	}
	return out
}

// checkDelivered checks that got holds every written event, large ones
// as references, each with its payload, and each aggregate's in order.
func checkDelivered(t *testing.T, wrote []written, got []received) {
	t.Helper()
	byID := map[string]written{}
	for _, w := range wrote {
		byID[w.id] = w
	}
	seen := map[string]bool{}
	last := map[string]int{}
	for _, r := range got {
		w, ok := byID[r.id]
		if !ok {
			t.Fatalf("received an event never written: %s", r.id)
		}
		if !bytes.Equal(r.payload, w.payload) {
			t.Errorf("event %s: %d bytes received, want the %d written", r.id, len(r.payload), len(w.payload))
		}
		if r.reference != w.large {
			t.Errorf("event %s of %d bytes: published as a reference %v, want %v", r.id, len(w.payload), r.reference, w.large)
		}
		if prev, ok := last[w.aggregate]; ok && w.seq < prev {
			t.Errorf("aggregate %s: event %d after %d", w.aggregate, w.seq, prev)
		}
		last[w.aggregate] = w.seq
		seen[r.id] = true
	}
	var missing []string
	for _, w := range wrote {
		if !seen[w.id] {
			missing = append(missing, w.id)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d events not delivered: %v", len(missing), missing)
	}
}

// states counts the outbox's rows by state.
func states(t *testing.T, db *testkit.DB) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.SQL.QueryContext(ctx, `SELECT state, count(*) FROM outbox GROUP BY state`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		out[s] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// flaky is a claim check store that fails on demand: before storing
// (the store away), or after (a crash between upload and publish).
type flaky struct {
	*claimcheck.Store
	mu          sync.Mutex
	failAfter   int // uploads that succeed and then fail the publish
	uploads     []string
	failedAfter []string
	failures    int // uploads the store failed
}

func (f *flaky) failed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failures
}

func (f *flaky) Offload(ctx context.Context, table txoutbox.Table, msg *message.Message) (*message.Message, error) {
	ref, err := f.Store.Offload(ctx, table, msg)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.failures++
		return nil, err
	}
	f.uploads = append(f.uploads, msg.UUID)
	if f.failAfter > 0 {
		f.failAfter--
		f.failedAfter = append(f.failedAfter, msg.UUID)
		return nil, fmt.Errorf("injected: the relay stops after the upload of %s", msg.UUID)
	}
	return ref, nil
}

func (f *flaky) count(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(slices.DeleteFunc(slices.Clone(f.uploads), func(u string) bool { return u != id }))
}

// breakDir makes the file store at dir fail (away): the directory
// becomes a file. Permissions would not stop root, which tests may run as.
func breakDir(t *testing.T, dir string) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mendDir brings the file store at dir back, empty.
func mendDir(t *testing.T, dir string) {
	t.Helper()
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// runWALRelay runs a WAL relay with the claim check through store until
// the test ends, and waits until it streams. MaxAttempts is 2: a store's
// outage must not make an event dead, however few attempts it has.
func runWALRelay(t *testing.T, db *testkit.DB, pub message.Publisher, store relay.LargePayloads) *walrelay.Relay {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		testkit.Eventually(20*time.Second, func() bool { // the slot stays active until its walsender has exited
			_, err := db.SQL.ExecContext(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`,
				walrelay.SlotDefault(db.Database(), db.Table()))
			return err == nil || ctx.Err() != nil
		})
		_, _ = db.SQL.ExecContext(ctx, `DROP PUBLICATION IF EXISTS `+walrelay.PublicationDefault(db.Database(), db.Table()))
	})
	r, err := walrelay.New(db.URL, pub, walrelay.Config{
		Table: db.Table(), StandbyRetry: 100 * time.Millisecond, MaxAttempts: 2,
		BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		LargePayloads: relay.LargePayloadsConfig{Store: store},
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(t.Context()) }() // cancelled before the cleanups run
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("WAL relay: %v", err)
		}
	})
	testkit.WaitFor(t, 30*time.Second, "the WAL relay to stream", r.Active)
	return r
}
