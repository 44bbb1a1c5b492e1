package relay

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"testing"
	"time"
)

// fakeMemberDB is a memberDB that records what it is asked, answers as a
// lone relay's database would, and cannot notify (no rebalanceNotifier),
// as a MySQL one would not.
type fakeMemberDB struct {
	calls      []string
	beat       heartbeat // what the next heartbeat returns, with beatErr
	beatErr    error
	registered []string
	others     []othersParams
}

func (f *fakeMemberDB) register(_ context.Context, p registration) ([]string, error) {
	f.calls = append(f.calls, "register")
	f.registered = append(f.registered, p.owner)
	return nil, nil
}

func (f *fakeMemberDB) heartbeat(context.Context, heartbeatParams) (heartbeat, error) {
	f.calls = append(f.calls, "heartbeat")
	hb, err := f.beat, f.beatErr
	f.beat, f.beatErr = heartbeat{live: []string{"r1"}, held: numShards}, nil
	return hb, err
}

func (f *fakeMemberDB) liveRelays(context.Context, time.Duration) (forgotten, live []string, err error) {
	f.calls = append(f.calls, "liveRelays")
	return nil, []string{"r1"}, nil
}

func (f *fakeMemberDB) moveShards(_ context.Context, p shardsParams) (int64, []int16, error) {
	f.calls = append(f.calls, "moveShards")
	return 0, p.shards, nil
}

func (f *fakeMemberDB) shardsInHandover(context.Context, handoverParams) ([]int16, error) {
	f.calls = append(f.calls, "shardsInHandover")
	return nil, nil
}

func (f *fakeMemberDB) otherIncarnations(_ context.Context, p othersParams) (int, error) {
	f.calls = append(f.calls, "otherIncarnations")
	f.others = append(f.others, p)
	return 0, nil
}

func (f *fakeMemberDB) leaveShards(context.Context, string) error {
	f.calls = append(f.calls, "leaveShards")
	return nil
}

func (f *fakeMemberDB) leaveRelay(context.Context, string) error {
	f.calls = append(f.calls, "leaveRelay")
	return nil
}

func (f *fakeMemberDB) walSlot(context.Context) (string, error) {
	f.calls = append(f.calls, "walSlot")
	return "", nil
}

// A heartbeat that found the incarnation's row gone ends the incarnation
// even when its transaction then failed: the row never comes back, so
// rows claimed under it are no longer the relay's to publish. The next
// round registers anew instead of heartbeating the dead incarnation, not
// standing by behind it.
func TestAHeartbeatThatFoundNoRowEndsTheIncarnationEvenIfItFailed(t *testing.T) {
	t.Parallel()
	db := &fakeMemberDB{}
	cfg := Config{ID: "r1", StatementTimeout: time.Second, HeartbeatInterval: time.Second, StaleAfter: 10 * time.Second, BatchSize: 10}
	c := &clock{base: time.Now()}
	m := newMembership(db, `"outbox"`, &cfg, slog.New(slog.DiscardHandler), c, make(chan struct{}, 1))
	if m.notifier != nil {
		t.Fatal("a memberDB that is not a rebalanceNotifier got a notifier")
	}

	if _, err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	first, shards := m.claimable()
	if first == nil || len(shards) != numShards {
		t.Fatalf("after the first round: incarnation %v, %d shards; want one, all %d", first, len(shards), numShards)
	}

	lost := errors.New("commit: connection reset")
	db.beat, db.beatErr = heartbeat{dead: true}, lost
	db.calls = nil
	if _, err := m.round(context.Background()); !errors.Is(err, lost) {
		t.Fatalf("round whose heartbeat failed: %v, want its error", err)
	}
	if first.live(c.now()) {
		t.Fatal("the incarnation whose heartbeat found no row is still live")
	}

	db.calls = nil
	if _, err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"otherIncarnations", "register", "liveRelays", "walSlot", "moveShards", "shardsInHandover"}; !reflect.DeepEqual(db.calls, want) {
		t.Fatalf("the round after: calls %q, want %q", db.calls, want)
	}
	if len(db.others) != 1 || !reflect.DeepEqual(db.others[0].own, []string{first.token}) {
		t.Fatalf("looked for other incarnations than %v, want than the ended %s", db.others, first.token)
	}
	next, shards := m.claimable()
	if next == nil || next == first || next.token != db.registered[1] || len(shards) != numShards {
		t.Fatalf("after registering anew: incarnation %v, %d shards; want %s, all %d", next, len(shards), db.registered[1], numShards)
	}
}
