package inboxe2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/inbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	if _, err := inbox.New(inbox.Config{Table: txoutbox.Table{Name: "x; drop table y"}}); !errors.Is(err, txoutbox.ErrInvalidTable) {
		t.Errorf("New with a bad table name = %v, want ErrInvalidTable", err)
	}
	_, err := inbox.New(inbox.Config{PruneBatch: -1})
	if err == nil || err.Error() != "inbox: Config.PruneBatch is negative (-1)" {
		t.Errorf("New with PruneBatch -1 = %v", err)
	}
	if _, err := inbox.New(inbox.Config{}); err != nil {
		t.Errorf("New with the zero Config = %v", err)
	}
}

func TestClaimFirstThenDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7())
	for i, want := range []bool{true, false, false} {
		tx, err := b.db.SQL.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		first, err := b.ib.Claim(ctx, tx, "billing", id)
		if err != nil || first != want {
			t.Fatalf("delivery %d: Claim = %v, %v; want %v", i+1, first, err, want)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, b.db.SQL, `SELECT count(*) FROM inbox WHERE consumer = 'billing' AND event_id = $1`, id.String()); n != 1 {
		t.Fatalf("inbox rows = %d, want 1", n)
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7())
	tx, err := b.db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ran := false
	fn := func() error { ran = true; return nil }
	cases := []struct {
		name     string
		tx       txoutbox.SQLExecer
		consumer string
		id       uuid.UUID
		want     error
		text     string
	}{
		{"empty consumer", tx, "", id, inbox.ErrInvalidConsumer, "inbox: invalid consumer name: empty"},
		{"nil event id", tx, "billing", uuid.Nil, inbox.ErrInvalidEventID, "inbox: invalid event id: the nil UUID"},
		{"a pool, not a transaction", b.db.SQL, "billing", id, inbox.ErrNotInTransaction,
			"inbox: txoutbox: not in a transaction: Claim got a *sql.DB; pass the *sql.Tx of the business change"},
	}
	for _, c := range cases {
		processed, err := b.ib.Process(ctx, c.tx, c.consumer, c.id, fn)
		if processed || !errors.Is(err, c.want) || err.Error() != c.text {
			t.Errorf("%s: Process = %v, %v; want %q", c.name, processed, err, c.text)
		}
	}
	if _, err := b.ib.Run(ctx, b.db.SQL, "", id, func(*sql.Tx) error { ran = true; return nil }); !errors.Is(err, inbox.ErrInvalidConsumer) {
		t.Errorf("Run with an empty consumer = %v", err)
	}
	if _, err := b.ib.Claim(ctx, nil, "billing", id); !errors.Is(err, inbox.ErrNotInTransaction) {
		t.Errorf("Claim on a nil transaction = %v", err)
	}
	if _, err := b.ib.Run(ctx, nil, "billing", id, func(*sql.Tx) error { ran = true; return nil }); err == nil {
		t.Error("Run on a nil database succeeded")
	}
	if _, err := b.ib.Prune(ctx, nil, time.Hour); err == nil {
		t.Error("Prune on a nil database succeeded")
	}
	if ran {
		t.Error("the handler ran for bad input")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, b.db.SQL, `SELECT count(*) FROM inbox`); n != 0 {
		t.Fatalf("inbox rows after bad input = %d, want 0", n)
	}
}

func TestHandlerFailureThenRedelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7())
	var runs int
	handler := func(fail bool) func(*sql.Tx) error {
		return func(tx *sql.Tx) error {
			runs++
			return effectOrFail(ctx, tx, "billing", id, "acct-1", 10, fail)
		}
	}
	if processed, err := b.ib.Run(ctx, b.db.SQL, "billing", id, handler(true)); processed || err != errBoom {
		t.Fatalf("failing delivery: Run = %v, %v; want false and the handler's own error", processed, err)
	}
	if n := count(t, b.db.SQL, `SELECT count(*) FROM inbox`); n != 0 {
		t.Fatalf("inbox rows after a failed handler = %d, want 0 (rolled back)", n)
	}
	for i, want := range []bool{true, false, false} {
		if processed, err := b.ib.Run(ctx, b.db.SQL, "billing", id, handler(false)); processed != want || err != nil {
			t.Fatalf("redelivery %d: Run = %v, %v; want %v", i+1, processed, err, want)
		}
	}
	if runs != 2 {
		t.Errorf("handler runs = %d, want 2 (the failure and the first redelivery)", runs)
	}
	if got := effectsOf(t, b.db.SQL, "billing"); got[id] != 1 || len(got) != 1 {
		t.Errorf("effects = %v, want exactly one for %s", got, id)
	}
	if got := balances(t, b.db.SQL); got["acct-1"] != 10 {
		t.Errorf("balance = %d, want 10", got["acct-1"])
	}
}

func TestProcessOnCallersTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7())
	checkRedeliveries(t, b, id, func(fail bool) (bool, error) {
		tx, err := b.db.SQL.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		processed, err := b.ib.Process(ctx, tx, "billing", id, func() error {
			return effectOrFail(ctx, tx, "billing", id, "acct-1", 5, fail)
		})
		if err != nil {
			_ = tx.Rollback()
			return processed, err
		}
		return processed, tx.Commit()
	})
}

func TestShuffledRedeliveriesApplyEachEffectOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rng := seededRand(t)

	type event struct {
		id      uuid.UUID
		account string
		amount  int64
	}
	const events, accounts = 300, 20
	want := map[string]int64{}
	var deliveries []event
	for i := range events {
		e := event{uuid.Must(uuid.NewV7()), fmt.Sprintf("acct-%d", i%accounts), int64(1 + rng.IntN(100))}
		want[e.account] += e.amount
		for range 1 + rng.IntN(3) {
			deliveries = append(deliveries, e)
		}
	}
	rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })

	// Four workers, so some duplicates are in flight at the same time.
	work := make(chan event)
	var processed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(deliveries))
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range work {
				ok, err := b.ib.Run(ctx, b.db.SQL, "billing", e.id, func(tx *sql.Tx) error {
					return effect(ctx, tx, "billing", e.id, e.account, e.amount)
				})
				if err != nil {
					errs <- err
				}
				if ok {
					processed.Add(1)
				}
			}
		}()
	}
	for _, d := range deliveries {
		work <- d
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if processed.Load() != events {
		t.Errorf("processed %d of %d deliveries, want each of the %d events once", processed.Load(), len(deliveries), events)
	}
	effects := effectsOf(t, b.db.SQL, "billing")
	if len(effects) != events {
		t.Errorf("%d events have effects, want %d", len(effects), events)
	}
	for id, n := range effects {
		if n != 1 {
			t.Errorf("event %s applied %d times", id, n)
		}
	}
	if got := balances(t, b.db.SQL); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("balances = %v\nwant %v", got, want)
	}
}

func TestConcurrentDuplicateWaitsForTheFirst(t *testing.T) {
	t.Parallel()
	for _, firstCommits := range []bool{true, false} {
		t.Run(fmt.Sprintf("first commits %v", firstCommits), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			id := uuid.Must(uuid.NewV7())

			txA, err := b.db.SQL.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer txA.Rollback()
			if first, err := b.ib.Claim(ctx, txA, "billing", id); !first || err != nil {
				t.Fatalf("A: Claim = %v, %v", first, err)
			}
			if err := effect(ctx, txA, "billing", id, "acct-1", 1); err != nil {
				t.Fatal(err)
			}

			var ranB atomic.Int32
			type result struct {
				processed bool
				err       error
			}
			done := make(chan result, 1)
			go func() {
				processed, err := b.ib.Run(ctx, b.db.SQL, "billing", id, func(tx *sql.Tx) error {
					ranB.Add(1)
					return effect(ctx, tx, "billing", id, "acct-1", 1)
				})
				done <- result{processed, err}
			}()
			waitForLockWait(t, b.db.SQL, b.db.Schema)
			select {
			case r := <-done:
				t.Fatalf("B finished (%+v) while A's claim was uncommitted", r)
			default:
			}
			if firstCommits {
				err = txA.Commit()
			} else {
				err = txA.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || r.processed == firstCommits || (ranB.Load() == 1) == firstCommits {
				t.Fatalf("B: Run = %+v, handler runs %d; want processed=%v", r, ranB.Load(), !firstCommits)
			}
			if got := effectsOf(t, b.db.SQL, "billing"); got[id] != 1 {
				t.Fatalf("effects = %v, want exactly one", got)
			}
		})
	}
}

// waitForLockWait returns once a statement on schema waits for a lock.
func waitForLockWait(t *testing.T, db *sql.DB, schema string) {
	t.Helper()
	if !testkit.Eventually(30*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND state = 'active' AND position($1 in query) > 0`, `"`+schema+`"`) > 0
	}) {
		t.Fatal("the duplicate never waited for the first transaction's row lock")
	}
}

func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for range 20 {
		id := uuid.Must(uuid.NewV7())
		var runs atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := b.ib.Run(ctx, b.db.SQL, "billing", id, func(tx *sql.Tx) error {
					runs.Add(1)
					return effect(ctx, tx, "billing", id, "acct-1", 1)
				})
				if err != nil {
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if runs.Load() != 1 {
			t.Fatalf("event %s: handler ran %d times, want 1", id, runs.Load())
		}
	}
	if got := balances(t, b.db.SQL); got["acct-1"] != 20 {
		t.Fatalf("balance = %d, want 20", got["acct-1"])
	}
}

func TestConsumersAreIndependent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7())
	for round, want := range []bool{true, false} {
		for _, consumer := range []string{"billing", "shipping"} {
			processed, err := b.ib.Run(ctx, b.db.SQL, consumer, id, func(tx *sql.Tx) error {
				return effect(ctx, tx, consumer, id, consumer, 1)
			})
			if processed != want || err != nil {
				t.Fatalf("round %d, %s: Run = %v, %v; want %v", round+1, consumer, processed, err, want)
			}
		}
	}
	for _, consumer := range []string{"billing", "shipping"} {
		if got := effectsOf(t, b.db.SQL, consumer); got[id] != 1 {
			t.Errorf("%s effects = %v, want one", consumer, got)
		}
	}
}

// Under REPEATABLE READ a duplicate that waited for the first transaction
// cannot see its row, so PostgreSQL fails it instead of skipping it; the
// redelivery then skips. Either way the handler runs once.
func TestConcurrentDuplicateUnderRepeatableRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ib, err := inbox.New(inbox.Config{Table: txoutbox.Table{Schema: b.db.Schema}, TxOptions: &sql.TxOptions{Isolation: sql.LevelRepeatableRead}})
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.Must(uuid.NewV7())
	txA, err := b.db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback()
	if first, err := ib.Claim(ctx, txA, "billing", id); !first || err != nil {
		t.Fatalf("A: Claim = %v, %v", first, err)
	}
	var runsB atomic.Int32
	fnB := func(tx *sql.Tx) error { runsB.Add(1); return nil }
	done := make(chan error, 1)
	go func() {
		_, err := ib.Run(ctx, b.db.SQL, "billing", id, fnB)
		done <- err
	}()
	waitForLockWait(t, b.db.SQL, b.db.Schema)
	if err := txA.Commit(); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if err := <-done; !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("B under REPEATABLE READ = %v, want a serialization failure (40001)", err)
	}
	if processed, err := ib.Run(ctx, b.db.SQL, "billing", id, fnB); processed || err != nil {
		t.Fatalf("redelivery = %v, %v; want skipped", processed, err)
	}
	if runsB.Load() != 0 {
		t.Fatalf("B's handler ran %d times", runsB.Load())
	}
}
