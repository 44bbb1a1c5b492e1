package relay

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
)

// fakeClaimDB is a claimDB that records what it is asked, and whose rows
// carry a version of another type than PostgreSQL's: a time.Time, as a
// MySQL claim's lease end would be.
type fakeClaimDB struct {
	calls    []string
	claims   [][]*claimedRow // what each claim returns, in turn
	claimErr error           // returned by the next claim, with its rows
	marked   []claimRef
	settled  []settlement
	outcomes []failOutcome
	released []claimRef
}

func (f *fakeClaimDB) claim(_ context.Context, p claimParams) ([]*claimedRow, []undecodableRow, error) {
	f.calls = append(f.calls, "claim "+p.owner)
	rows := f.claims[0]
	f.claims = f.claims[1:]
	err := f.claimErr
	f.claimErr = nil
	return rows, nil, err
}

func (f *fakeClaimDB) mark(_ context.Context, rows []claimRef) error {
	f.calls = append(f.calls, "mark")
	f.marked = append(f.marked, rows...)
	return nil
}

func (f *fakeClaimDB) settle(_ context.Context, s settlement) ([]failOutcome, error) {
	f.calls = append(f.calls, "settle")
	f.settled = append(f.settled, s)
	return f.outcomes, nil
}

func (f *fakeClaimDB) release(_ context.Context, rows []claimRef) (int64, error) {
	f.calls = append(f.calls, "release")
	f.released = append(f.released, rows...)
	return int64(len(rows)), nil
}

type fakeMembers struct{ inc *incarnation }

func (m fakeMembers) claimable() (*incarnation, []int16) { return m.inc, []int16{0} }

func fakeMetrics(t *testing.T) *metrics {
	t.Helper()
	met, err := newMetrics(noop.NewMeterProvider(), "outbox")
	if err != nil {
		t.Fatal(err)
	}
	return met
}

// The claimer and the completer give a row's version back to the
// database as the claim returned it, whatever its type: a claim whose
// commit was not confirmed is released, under its owner and version,
// before the next claim; marks, failures and releases carry them too.
func TestClaimCycleCarriesTheClaimsVersion(t *testing.T) {
	t.Parallel()
	inc := &incarnation{token: "r1#a"}
	v1, v2 := time.Unix(1, 0).UTC(), time.Unix(2, 0).UTC()
	db := &fakeClaimDB{
		claims: [][]*claimedRow{
			{{id: 1, version: v1}, {id: 2, version: v1}},
			{{id: 1, version: v2}, {id: 2, version: v2}, {id: 3, version: v2}},
		},
		claimErr: errors.New("commit: connection reset"),
		outcomes: []failOutcome{{id: 2, dead: true}},
	}
	cfg := Config{StatementTimeout: time.Second, LeaseDuration: time.Minute, HeartbeatInterval: time.Second, BatchBytes: 1 << 20, MaxAttempts: 3}
	log := slog.New(slog.DiscardHandler)
	met := fakeMetrics(t)
	c := newClaimer(claimerDeps{db: db, cfg: cfg, log: log, met: met, clock: &clock{base: time.Now()},
		members: fakeMembers{inc}, stalled: func() bool { return false }, claimed: new(atomic.Int64)})

	if rows, err := c.claim(context.Background(), 10); err == nil || len(rows) != 0 {
		t.Fatalf("claim whose commit failed: %d rows, %v; want none and the error", len(rows), err)
	}
	rows, err := c.claim(context.Background(), 10)
	if err != nil || len(rows) != 3 {
		t.Fatalf("next claim: %d rows, %v", len(rows), err)
	}
	want := []claimRef{{1, inc.token, v1}, {2, inc.token, v1}}
	if !reflect.DeepEqual(db.released, want) {
		t.Fatalf("released %v, want the unconfirmed claim's rows %v", db.released, want)
	}
	for _, row := range rows {
		if row.inc != inc || row.seq != 2 {
			t.Fatalf("row %d: incarnation %v, claim %d; want %s's, claim 2", row.id, row.inc, row.seq, inc.token)
		}
	}

	recorded := 0
	done := func(uint64) { recorded++ }
	comp := newCompleter(completerDeps{db: db, cfg: cfg, log: log, met: met, lastClaim: c.lastSeq})
	if err := comp.flush(context.Background(), rows[:1], nil, nil); err != nil {
		t.Fatal(err)
	}
	if want := []claimRef{{1, inc.token, v2}}; !reflect.DeepEqual(db.marked, want) {
		t.Fatalf("marked %v, want %v", db.marked, want)
	}
	fails := []failedRow{{row: rows[1], err: "refused", permanent: true, delay: time.Second, onRecorded: done}}
	releases := []releasedRow{{row: rows[2], onRecorded: done}}
	if err := comp.flush(context.Background(), nil, fails, releases); err != nil {
		t.Fatal(err)
	}
	wantSettled := settlement{
		fails:       []rowFailure{{claimRef: claimRef{2, inc.token, v2}, err: "refused", permanent: true, delay: time.Second}},
		maxAttempts: 3,
		releases:    []claimRef{{3, inc.token, v2}},
	}
	if len(db.settled) == 1 && len(db.settled[0].marks) == 0 {
		db.settled[0].marks = nil
	}
	if len(db.settled) != 1 || !reflect.DeepEqual(db.settled[0], wantSettled) {
		t.Fatalf("settled %+v, want %+v", db.settled, wantSettled)
	}
	if recorded != 2 {
		t.Fatalf("%d outcomes told they were recorded, want 2", recorded)
	}
	if want := []string{"claim r1#a", "release", "claim r1#a", "mark", "settle"}; !reflect.DeepEqual(db.calls, want) {
		t.Fatalf("calls %q, want %q", db.calls, want)
	}
}

// probingClaimDB is a claimDB whose claims take nothing and that tells,
// through anyDue, what its due channel says (an error when it sends nil).
type probingClaimDB struct {
	fakeClaimDB
	due    chan *bool    // the answers anyDue gives, in turn
	claims atomic.Int64  // claims run
	probed chan struct{} // signalled after each answer
}

func (p *probingClaimDB) claim(context.Context, claimParams) ([]*claimedRow, []undecodableRow, error) {
	p.claims.Add(1)
	return nil, nil, nil
}

func (p *probingClaimDB) anyDue(ctx context.Context) (bool, error) {
	defer func() { p.probed <- struct{}{} }()
	select {
	case due := <-p.due:
		if due == nil {
			return false, errors.New("connection refused")
		}
		return *due, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// On a database without NOTIFY the claimer asks the claimDB before each
// poll's claim whether anything is due: a poll that finds nothing runs no
// claim, one that finds something, or whose probe fails, claims.
func TestPollClaimsOnlyWhatTheProbeFindsDue(t *testing.T) {
	t.Parallel()
	db := &probingClaimDB{due: make(chan *bool), probed: make(chan struct{})}
	cfg := Config{StatementTimeout: time.Second, LeaseDuration: time.Minute, HeartbeatInterval: time.Second,
		BatchSize: 10, MaxInFlight: 20, BatchBytes: 1 << 20, MaxInFlightBytes: 2 << 20,
		PollInterval: 10 * time.Millisecond, ClaimCooldown: time.Millisecond}
	c := newClaimer(claimerDeps{db: db, cfg: cfg, log: slog.New(slog.DiscardHandler), met: fakeMetrics(t),
		clock: &clock{base: time.Now()}, members: fakeMembers{&incarnation{token: "r1#a"}}, stalled: func() bool { return false },
		budget: newBudget(cfg.MaxInFlight, cfg.MaxInFlightBytes), outage: &outage{}, lockout: &lockout{}, claimed: new(atomic.Int64)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx, nil) }()
	defer func() { cancel(); <-done }()

	answer := func(due *bool) {
		t.Helper()
		select {
		case db.due <- due:
		case <-time.After(10 * time.Second):
			t.Fatal("the claimer did not ask whether anything is due within 10s of a poll")
		}
		<-db.probed
	}
	no, yes := false, true
	answer(&no) // the first poll after the claim at start
	answer(&no)
	answer(&no)
	if n := db.claims.Load(); n != 1 {
		t.Fatalf("%d claims after three polls found nothing due, want only the one at start", n)
	}
	answer(&yes)
	answer(&no) // the next poll: the claim after the yes has run
	if n := db.claims.Load(); n != 2 {
		t.Fatalf("%d claims after a poll found rows due, want 2", n)
	}
	answer(nil)
	answer(&no)
	if n := db.claims.Load(); n != 3 {
		t.Fatalf("%d claims after a probe failed, want 3: a failed probe claims", n)
	}
}
