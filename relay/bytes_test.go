package relay

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// writeSized commits n events of 1000-byte payloads, aggregates
// interleaved.
func (b *internalBundle) writeSized(t *testing.T, n int, aggs ...string) {
	t.Helper()
	b.exec(t, `INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload)
		SELECT gen_random_uuid(), 'orders', a, 'order.changed', convert_to(repeat('x', 1000), 'UTF8')
		FROM generate_series(1, $1) i, unnest($2::text[]) WITH ORDINALITY AS g(a, k) ORDER BY i, k`, n, "{"+strings.Join(aggs, ",")+"}")
}

func claimWithinIDs(t *testing.T, r *Relay, bytes int64) string {
	t.Helper()
	rows, err := r.claimer.claimWithin(context.Background(), 100, bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if row.bytes != 1000 {
			t.Fatalf("row %d counted as %d bytes, want 1000", row.id, row.bytes)
		}
	}
	return idsOf(rows)
}

// A claim stops before the row that would take it past its byte budget, in
// id order, and takes one row even when that row alone is larger.
func TestClaimStopsAtItsByteBudget(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.writeSized(t, 3, "k", "m") // k: 1 3 5, m: 2 4 6
	r := b.readyRelay(t, "r1")
	for _, c := range []struct {
		bytes int64
		want  string
	}{{2500, "1 2"}, {3000, "3 4 5"}, {10, "6"}} {
		if got := claimWithinIDs(t, r, c.bytes); got != c.want {
			t.Fatalf("claim within %d bytes took %q, want %q", c.bytes, got, c.want)
		}
	}
}

// A row the budget leaves out is claimed later, never one of its
// aggregate's later rows before it: with row 1 held by a peer's lock, the
// claim passes over k entirely, and the budget still counts from m.
func TestClaimByteBudgetKeepsOrder(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.writeSized(t, 3, "k", "m")
	r := b.readyRelay(t, "r1")
	release := b.lock(t, `SELECT 1 FROM outbox WHERE id = 1 FOR UPDATE`)
	if got := claimWithinIDs(t, r, 2000); got != "2" {
		t.Fatalf("claim within 2000 bytes with row 1 locked took %q, want 2 (1 locked, 2 fits, 3 held back behind 1)", got)
	}
	release()
	if got := claimWithinIDs(t, r, 2000); got != "1 3" {
		t.Fatalf("claim took %q, want 1 3", got)
	}
}

// The rows held in memory stay within MaxInFlightBytes, however many rows
// MaxInFlight allows.
func TestInFlightStaysWithinItsByteBudget(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.writeSized(t, 10, "a", "b", "c", "d")
	pub := newHungPublisher()
	cfg := fastConfig(b)
	cfg.BatchSize, cfg.MaxInFlight = 100, 200
	cfg.BatchBytes, cfg.MaxInFlightBytes = 3000, 4000
	r := b.newRelayWith(t, pub, cfg)
	start(t, r)
	var once sync.Once
	release := func() { once.Do(func() { close(pub.release) }) }
	t.Cleanup(release) // before Run is stopped, should the test fail
	<-pub.calls
	// A claim of 3000 bytes leaves 1000 of room, less than the half batch
	// the relay waits for: it claims no more, however long it polls (every
	// 10ms here) and however many rows MaxInFlight would allow.
	time.Sleep(2 * time.Second) // about time: nothing more is claimed meanwhile
	if n := b.count(t, `SELECT count(*) FROM outbox WHERE lease_owner IS NOT NULL`); n != 3 {
		t.Fatalf("%d rows of 1000 bytes claimed at once with BatchBytes 3000 and MaxInFlightBytes 4000, want 3", n)
	}
	if got := r.budget.bytes.Load(); got != 3000 {
		t.Fatalf("%d bytes counted in flight, want 3000", got)
	}
	release()
	b.waitPublished(t, 20*time.Second, 40)
	if got := r.budget.bytes.Load(); got != 0 {
		t.Fatalf("%d bytes counted in flight once everything is published", got)
	}
}
