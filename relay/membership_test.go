package relay

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAssignShardsCoversEveryShardOnce(t *testing.T) {
	t.Parallel()
	live := []string{"a", "b", "c"}
	owner := map[int16]string{}
	for _, id := range live {
		for _, s := range assignShards(id, live) {
			if prev, ok := owner[s]; ok {
				t.Fatalf("shard %d assigned to %s and %s", s, prev, id)
			}
			owner[s] = id
		}
	}
	if len(owner) != numShards {
		t.Fatalf("%d of %d shards assigned", len(owner), numShards)
	}
	// Rendezvous hashing: when c leaves, a and b keep every shard they had.
	for _, id := range []string{"a", "b"} {
		after := map[int16]bool{}
		for _, s := range assignShards(id, []string{"a", "b"}) {
			after[s] = true
		}
		for _, s := range assignShards(id, live) {
			if !after[s] {
				t.Fatalf("shard %d moved away from %s when c left", s, id)
			}
		}
	}
}

func TestIncarnationEndsAtItsDeadline(t *testing.T) {
	t.Parallel()
	inc := newIncarnation("r")
	inc.extend(10 * time.Second)
	if !inc.live(9 * time.Second) {
		t.Fatal("not live before its deadline")
	}
	inc.extend(5 * time.Second) // never moves back
	if !inc.live(9 * time.Second) {
		t.Fatal("deadline moved back")
	}
	if inc.live(10 * time.Second) {
		t.Fatal("live at its deadline")
	}
	inc.extend(time.Hour)
	if inc.live(11 * time.Second) {
		t.Fatal("an ended incarnation came back to life when its deadline moved")
	}
}

// A relay restarted under the same id replaces its earlier incarnation at
// once: the old one's row is gone, so its shards and claims are taken over
// without waiting for StaleAfter, and the two never count as one.
func TestRestartUnderSameIDReplacesEarlierIncarnation(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	ctx := context.Background()
	first := b.registered(t, "r1")
	old := first.members.cur.Load()
	second := b.registered(t, "r1")
	cur := second.members.cur.Load()
	if cur.token == old.token {
		t.Fatal("two runs of r1 share an incarnation")
	}
	if ids := b.relayIDs(t); len(ids) != 1 || ids[0] != cur.token {
		t.Fatalf("relays = %v, want only %s", ids, cur.token)
	}
	// The first incarnation learns at its next heartbeat that it was
	// replaced: it ends (its lanes drop what it holds) and stands by
	// instead of replacing the second one back, so two relays started
	// under one id by mistake do not evict each other at every heartbeat.
	if _, err := first.members.round(ctx); !errors.Is(err, errStandingBy) {
		t.Fatalf("round of the replaced relay = %v, want errStandingBy", err)
	}
	if old.live(first.clock.now()) {
		t.Fatal("a replaced incarnation is still live")
	}
	if inc, _ := first.members.claimable(); inc != nil {
		t.Fatal("a relay standing by may claim")
	}
	if ids := b.relayIDs(t); len(ids) != 1 || ids[0] != cur.token {
		t.Fatalf("relays = %v after the replaced one's round, want only %s", ids, cur.token)
	}
	// Once the second is gone, the first registers anew.
	second.members.leave()
	round(t, first)
	if inc := first.members.cur.Load(); inc == old || !inc.live(first.clock.now()) {
		t.Fatal("no live new incarnation after the other one left")
	}
}

// A relay whose heartbeat went stale is declared dead by a peer; at its own
// next heartbeat it ends that incarnation instead of carrying on.
func TestDeclaredDeadRelayEndsItsIncarnation(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	r := b.registered(t, "r1")
	old := r.members.cur.Load()
	b.exec(t, `DELETE FROM outbox_relays`) // what a peer's ForgetStaleRelays does
	round(t, r)
	if old.live(r.clock.now()) {
		t.Fatal("the incarnation declared dead is still live")
	}
	if cur := r.members.cur.Load(); cur == old || !cur.live(r.clock.now()) {
		t.Fatal("no live new incarnation after being declared dead")
	}
}

// A relay that cannot heartbeat stops claiming and publishing at its
// deadline, before peers may declare it dead.
func TestNoClaimsPastTheDeadline(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	r := b.registered(t, "r1")
	if inc, shards := r.members.claimable(); inc == nil || len(shards) != numShards {
		t.Fatalf("claimable = %v, %d shards; want the incarnation and every shard", inc, len(shards))
	}
	r.clock.base = r.clock.base.Add(-r.cfg.StaleAfter) // as if no heartbeat for StaleAfter
	if inc, _ := r.members.claimable(); inc != nil {
		t.Fatal("claimable past the deadline")
	}
}

// A relay whose heartbeats all stalled past its deadline (no crash, no
// peer's verdict) says so, once: the rows it published but had not marked
// are published again by its next incarnation, and this line is what tells
// those duplicates from a crash's.
func TestARelayPastItsDeadlineSaysSoOnce(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	var logs strings.Builder
	var mu sync.Mutex
	r := b.newRelayWith(t, nopPublisher{}, Config{Table: b.db.Table(), ID: "r1",
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	round(t, r)
	old := r.members.cur.Load()
	r.clock.base = r.clock.base.Add(-r.cfg.StaleAfter) // as if no heartbeat for StaleAfter
	round(t, r)
	round(t, r)
	if cur := r.members.cur.Load(); cur == old || !cur.live(r.clock.now()) {
		t.Fatal("no live new incarnation after the deadline passed")
	}
	mu.Lock()
	defer mu.Unlock()
	const said = "no heartbeat succeeded within StaleAfter"
	if n := strings.Count(logs.String(), said); n != 1 {
		t.Fatalf("%q logged %d times, want once:\n%s", said, n, logs.String())
	}
	if !strings.Contains(logs.String(), old.token) {
		t.Fatalf("the line does not name the ended incarnation %s:\n%s", old.token, logs.String())
	}

	// Ended by a peer's verdict instead, it says that and not this.
	logs.Reset()
	mu.Unlock()
	b.exec(t, `DELETE FROM outbox_relays`)
	round(t, r)
	mu.Lock()
	if strings.Contains(logs.String(), said) || !strings.Contains(logs.String(), "peers declared this relay dead") {
		t.Fatalf("after a peer's verdict the relay logged:\n%s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// A round is one transaction for the heartbeat, the stale relays and the
// live list, and one for the WAL check. The shards' transaction runs only
// when something changed since the relay last claimed from every shard it
// should own: a peer joined or left, or its incarnation is new.
func TestASettledRoundLeavesTheShardsAlone(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	db, st := b.db.Traced(t)
	r, err := New(db, nopPublisher{}, Config{Table: b.db.Table(), ID: "r1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	acquire := "WITH taken AS"
	rounds := func(n int) (transactions, shardMoves int) {
		t.Helper()
		from := time.Now()
		for range n {
			round(t, r)
		}
		return len(st.Matching("BEGIN", from)), len(st.Matching(acquire, from))
	}
	if _, moves := rounds(1); moves != 1 {
		t.Fatalf("the first round took its shards %d times, want once", moves)
	}
	if _, shards := r.members.claimable(); len(shards) != numShards {
		t.Fatalf("r1 claims from %d shards, want %d", len(shards), numShards)
	}
	if tx, moves := rounds(3); tx != 6 || moves != 0 {
		t.Fatalf("3 settled rounds: %d transactions, %d shard moves; want 6 and none", tx, moves)
	}
	if _, shards := r.members.claimable(); len(shards) != numShards {
		t.Fatalf("r1 claims from %d shards after settled rounds, want %d", len(shards), numShards)
	}

	// A shard left unowned behind its back (a peer whose acquire began
	// before r1 registered took it, and gave it up at its next round) is
	// taken again.
	b.exec(t, `UPDATE outbox_shards SET owner = NULL WHERE shard = 7`)
	if _, moves := rounds(1); moves != 1 {
		t.Fatalf("with a shard unowned: %d shard moves, want 1", moves)
	}
	if got := b.count(t, `SELECT count(*) FROM outbox_shards WHERE owner = '`+r.members.cur.Load().token+`'`); got != numShards {
		t.Fatalf("r1 owns %d shards, want %d", got, numShards)
	}

	// A peer joins: the shards are shared out again.
	peer := b.registered(t, "r2")
	round(t, peer)
	if _, moves := rounds(1); moves != 1 {
		t.Fatalf("after a peer joined: %d shard moves, want 1", moves)
	}
	want := assignShards("r1", []string{"r1", "r2"})
	if _, shards := r.members.claimable(); !slices.Equal(shards, want) {
		t.Fatalf("r1 claims from %d shards after r2 joined, want its %d", len(shards), len(want))
	}
	if _, moves := rounds(2); moves != 0 {
		t.Fatalf("settled again: %d shard moves, want none", moves)
	}

	// Declared dead: a new incarnation takes its shards again.
	b.exec(t, `DELETE FROM outbox_relays WHERE id = $1`, r.members.cur.Load().token)
	if _, moves := rounds(1); moves != 1 {
		t.Fatalf("after being declared dead: %d shard moves, want 1", moves)
	}
	if got := b.count(t, `SELECT count(*) FROM outbox_shards WHERE owner = '`+r.members.cur.Load().token+`'`); got != len(want) {
		t.Fatalf("the new incarnation owns %d shards, want %d", got, len(want))
	}

	// A failed round forgets that it was settled.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.members.round(ctx); err == nil {
		t.Fatal("a round on a cancelled context succeeded")
	}
	if _, moves := rounds(1); moves != 1 {
		t.Fatalf("after a failed round: %d shard moves, want 1", moves)
	}
}
