package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync/atomic"
	"testing"
	"time"
)

// fakeFloorDB is a floorDB that records what it is asked. Its proofs
// carry a database part of another type than PostgreSQL's (a time.Time).
type fakeFloorDB struct {
	calls  []string
	proofs []floorProof // what each floorStart returns, in turn
	passed bool
	raised bool
	ranges []idRange
	floor  int64
	first  int64 // firstUnpublished's id; 0: none
}

func (f *fakeFloorDB) floorStart(context.Context) (floorProof, error) {
	f.calls = append(f.calls, "start")
	p := f.proofs[0]
	f.proofs = f.proofs[1:]
	return p, nil
}

func (f *fakeFloorDB) floorPassed(_ context.Context, p floorProof) (bool, error) {
	f.calls = append(f.calls, fmt.Sprint("passed ", p.db))
	return f.passed, nil
}

func (f *fakeFloorDB) floorRaise(_ context.Context, p floorProof) (int64, bool, error) {
	f.calls = append(f.calls, fmt.Sprint("raise ", p.db))
	return 7, f.raised, nil
}

func (f *fakeFloorDB) floorRead(context.Context) (int64, error) {
	f.calls = append(f.calls, "read")
	return f.floor, nil
}

func (f *fakeFloorDB) claimRanges(context.Context) ([]idRange, error) {
	f.calls = append(f.calls, "ranges")
	return f.ranges, nil
}

func (f *fakeFloorDB) firstUnpublished(_ context.Context, below []idRange) (int64, bool, error) {
	f.calls = append(f.calls, fmt.Sprint("first ", len(below)))
	return f.first, f.first != 0, nil
}

func newFakeFloor(db floorDB) *floorRaiser {
	return &floorRaiser{db: db, interval: time.Second, timeout: time.Second, log: slog.New(slog.DiscardHandler),
		low: new(atomic.Int64), claimed: new(atomic.Int64), perProof: 1}
}

// The floor rounds hand a proof's database part back as floorStart
// returned it, whatever its type, and start again when the raise raised
// nothing; an idle proof, which a database without floor proofs answers,
// is neither checked nor raised.
func TestFloorRoundsCarryTheProof(t *testing.T) {
	t.Parallel()
	at := time.Unix(1, 0).UTC()
	db := &fakeFloorDB{passed: true, proofs: []floorProof{{gen: 1, db: at}, {gen: 2, idle: true}, {gen: 2, idle: true}}}
	f := newFakeFloor(db)
	for range 3 {
		f.claimed.Add(1) // a batch claimed: a proof each round
		if err := f.round(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"start", fmt.Sprint("passed ", at), fmt.Sprint("raise ", at), "start", "start"}
	if !reflect.DeepEqual(db.calls, want) {
		t.Fatalf("calls %q, want %q", db.calls, want)
	}
	if f.proof != nil {
		t.Fatal("an idle proof is pending")
	}
	db.proofs = []floorProof{{gen: -1}}
	f.claimed.Add(1)
	if err := f.round(context.Background()); !errors.Is(err, errNoFloor) {
		t.Fatalf("a proof of no floor: %v, want errNoFloor", err)
	}
}

// The claims' Low: 0 without range partitions, with no statement more for
// partitionsRelist; with them, the start of the floor's partition or the
// first unpublished id below the floor, whichever is lower.
func TestFloorRoundsFindLowFromTheRanges(t *testing.T) {
	t.Parallel()
	db := &fakeFloorDB{}
	f := newFakeFloor(db)
	for range 2 {
		if err := f.findLow(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if low := f.low.Load(); low != 0 || !reflect.DeepEqual(db.calls, []string{"ranges"}) {
		t.Fatalf("one table: low %d, calls %q; want 0 and one listing", low, db.calls)
	}
	f.low.Store(-1)
	f.oneTableUntil = time.Time{}
	db.calls = nil
	db.ranges = []idRange{{"p0", 0, 100}, {"p1", 100, 200}, {"p2", 200, 300}}
	db.floor = 250
	if err := f.findLow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if low := f.low.Load(); low != 200 {
		t.Fatalf("low %d, want 200: the start of the floor's partition", low)
	}
	if want := []string{"ranges", "read", "first 2"}; !reflect.DeepEqual(db.calls, want) {
		t.Fatalf("calls %q, want %q", db.calls, want)
	}
	db.first = 42
	if err := f.findLow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if low := f.low.Load(); low != 42 {
		t.Fatalf("low %d, want 42: a retry below the floor", low)
	}
}

// fakePruneDB is a pruneDB that records what it is asked: the batches it
// deletes, in turn.
type fakePruneDB struct {
	calls   []string
	state   pruneState
	round   partitionRound
	batches []int64
}

func (f *fakePruneDB) pruneState(context.Context) (pruneState, error) {
	f.calls = append(f.calls, "state")
	return f.state, nil
}

func (f *fakePruneDB) maintainPartitions(_ context.Context, p partitionParams) (partitionRound, error) {
	f.calls = append(f.calls, fmt.Sprintf("maintain %d %d %s", p.maxID, p.floor, p.retention))
	return f.round, nil
}

func (f *fakePruneDB) pruneBatch(_ context.Context, p pruneParams) (int64, bool, error) {
	f.calls = append(f.calls, fmt.Sprintf("batch %q %s %d", p.partition, p.retention, p.batch))
	n := f.batches[0]
	f.batches = f.batches[1:]
	return n, true, nil
}

// A prune deletes batches from the table until one comes short when the
// outbox is not partitioned (as a database without partitions answers),
// and from each partition the maintenance kept when it is.
func TestPruneBatchesUntilShort(t *testing.T) {
	t.Parallel()
	db := &fakePruneDB{batches: []int64{2, 2, 1}}
	p := &pruner{db: db, cfg: Config{Retention: time.Hour, PruneBatch: 2, PruneInterval: time.Second, StatementTimeout: time.Second},
		log: slog.New(slog.DiscardHandler)}
	n, err := p.prune(context.Background())
	if err != nil || n != 5 {
		t.Fatalf("pruned %d, %v; want 5", n, err)
	}
	table := `batch "" 1h0m0s 2`
	if want := []string{"state", table, table, table}; !reflect.DeepEqual(db.calls, want) {
		t.Fatalf("calls %q, want %q", db.calls, want)
	}

	db.calls = nil
	db.state = pruneState{partitioned: true, owner: true, maxID: 150, floor: 120}
	db.round = partitionRound{locked: true, top: 300, kept: []string{"p1", "pd"}}
	db.batches = []int64{0, 1}
	if n, err := p.prune(context.Background()); err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want 1", n, err)
	}
	want := []string{"state", "maintain 150 120 1h0m0s", `batch "p1" 1h0m0s 2`, `batch "pd" 1h0m0s 2`}
	if !reflect.DeepEqual(db.calls, want) {
		t.Fatalf("calls %q, want %q", db.calls, want)
	}
}
