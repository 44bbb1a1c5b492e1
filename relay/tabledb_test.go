package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// serverErr is a server error told by its number, as MySQL's are.
type serverErr struct{ number int }

func (e serverErr) Error() string { return fmt.Sprintf("Error %d", e.number) }

// fakeTableDB is a tableDB of another database than PostgreSQL: a lock
// given up on is MySQL's error 1205 (a lock wait timeout) or 3572
// (NOWAIT), and its probes return, in turn, what probes holds.
type fakeTableDB struct {
	mu     sync.Mutex
	probes []error // what each probe returns, in turn; nil once they run out
	probed int
}

func (f *fakeTableDB) probe(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probed++
	if len(f.probes) == 0 {
		return nil
	}
	err := f.probes[0]
	f.probes = f.probes[1:]
	return err
}

func (f *fakeTableDB) lockWait(err error) bool {
	var se serverErr
	return errors.As(err, &se) && (se.number == 1205 || se.number == 3572)
}

func (f *fakeTableDB) checkSchema(context.Context) error { return nil }
func (f *fakeTableDB) checkGrants(context.Context) error { return nil }

// The lockout's episode is written once, above the database: what the
// database calls a lock given up on starts an episode, logged and counted
// once however many statements hit it, its statement time limit does not,
// and the episode lasts until the database's probe passes, logging at
// Debug only a probe that failed for another reason than a lock or a gate.
func TestLockoutEpisodeOnAnotherDatabase(t *testing.T) {
	t.Parallel()
	db := &fakeTableDB{probes: []error{
		fmt.Errorf("probe: %w", serverErr{3572}),
		errGateHeld,
		errors.New("connection refused"),
	}}
	logs := newLogRecorder()
	mp := newMeterRecorder()
	met, err := newMetrics(mp, "outbox")
	if err != nil {
		t.Fatal(err)
	}
	l := newLockout(db, &clock{base: time.Now()}, slog.New(logs), met,
		Config{LockTimeout: time.Second, HeartbeatInterval: time.Millisecond})
	ctx := context.Background()

	for _, err := range []error{errors.New("boom"), serverErr{3024}, fmt.Errorf("claim: %w", serverErr{1969})} {
		if l.hit(ctx, err) || l.locked() {
			t.Fatalf("hit(%v) started an episode; want one only for a lock given up on", err)
		}
	}
	if !l.hit(ctx, fmt.Errorf("heartbeat: %w", serverErr{1205})) || !l.hit(ctx, serverErr{1205}) {
		t.Fatal("a lock wait timeout (1205) was not a lockout hit")
	}
	if !l.locked() {
		t.Fatal("the table is not locked out after a lock wait timeout")
	}
	if !l.hit(ctx, errLockedOut) {
		t.Fatal("errLockedOut was not a lockout hit")
	}
	if n := logs.count(slog.LevelWarn, lockWarn); n != 1 {
		t.Fatalf("the episode's start logged %d times, want once", n)
	}
	counted := 0
	for _, p := range mp.recorded() {
		if p.name == "txoutbox.relay.lock_timeouts" {
			counted += int(p.value)
		}
	}
	if counted != 2 {
		t.Fatalf("lock_timeouts counted %d, want the 2 lock wait timeouts", counted)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.run(runCtx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	select {
	case <-l.ended():
	case <-time.After(10 * time.Second):
		t.Fatal("the episode did not end once the probe passed")
	}
	if l.locked() {
		t.Fatal("the table is still locked out after the probe passed")
	}
	db.mu.Lock()
	probed := db.probed
	db.mu.Unlock()
	if probed != 4 {
		t.Fatalf("%d probes, want 4: the episode ends at the first that passes", probed)
	}
	if n := logs.count(slog.LevelDebug, "relay: probe the locked-out table"); n != 1 {
		t.Fatalf("%d failed probes logged, want 1: the one that failed for another reason than a lock or a gate", n)
	}
	if n := logs.count(slog.LevelInfo, "relay: the lock on the table is gone"); n != 1 {
		t.Fatalf("the episode's end logged %d times, want once", n)
	}
}
