package relay

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/partitions"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// partition converts b's outbox into partitions of size ids.
func (b *internalBundle) partition(t *testing.T, size int64) {
	t.Helper()
	m, err := migrations.New(b.db.SQL, migrations.Config{Table: b.db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Partition(context.Background(), size); err != nil {
		t.Fatal(err)
	}
}

// writeSeq commits events n..n+count-1 of aggregate agg, one a
// transaction, with their number as payload.
func (b *internalBundle) writeSeq(ctx context.Context, agg string, from, count int) error {
	for i := from; i < from+count; i++ {
		e, err := txoutbox.NewEvent("orders", "order", agg, "order.changed", i)
		if err != nil {
			return err
		}
		tx, err := b.db.SQL.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := b.w.Write(ctx, tx, e); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("event %d of %s: %w", i, agg, err)
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// The conversion of an outbox in use loses no event and breaks no order:
// writers write and two relays publish (preparing their statements once,
// before) while the table becomes partitioned, and on into partitions the
// relays create ahead; every event is delivered, each aggregate's in
// order. The relays' cached statements, planned against the table's old
// OID, are planned again against the partitioned parent; the claim gate
// and prune lock are keyed by the table's channel, not its OID.
func TestConversionWhileRelaysAndWritersRun(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	pub := newGroupPublisher(0, 0)
	const writers, perWriter = 4, 300
	aggs := make([]string, writers)
	for i := range aggs {
		aggs[i] = fmt.Sprintf("w%d", i)
	}
	for _, id := range []string{"r1", "r2"} {
		r := b.newRelayWith(t, pub, Config{Table: b.db.Table(), ID: id, Logger: slog.New(slog.DiscardHandler),
			BatchSize: 50, PollInterval: 10 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond,
			StaleAfter: time.Second, LeaseDuration: time.Second, PruneInterval: 50 * time.Millisecond})
		testkit.Run(t, r.Run)
	}
	var written atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	converting := make(chan struct{}) // the writers write the rest while the table is converted
	for _, agg := range aggs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i += 10 {
				if i == perWriter/3 {
					select {
					case <-converting:
					case <-t.Context().Done():
						return
					}
				}
				if err := b.writeSeq(context.Background(), agg, i, 10); err != nil {
					errs <- err
					return
				}
				written.Add(10)
			}
		}()
	}
	testkit.WaitFor(t, time.Minute, "a third of the events written", func() bool { return written.Load() >= writers*perWriter/3 })
	close(converting)
	b.partition(t, 200)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	testkit.WaitFor(t, time.Minute, "every event published", func() bool {
		return b.publishedRows(t) == writers*perWriter
	})
	pub.checkOrder(t, "orders", perWriter, aggs...)
	if n := b.count(t, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox'::regclass`); n < 4 {
		t.Fatalf("%d partitions; want the first, the default, and those the relays created ahead", n)
	}
}

// Writers never fail for want of a partition: with the relays down, rows
// past the partitions go to the default one. A relay then publishes them
// in order and creates the next partitions above them; new rows go there,
// and the default partition is pruned row by row.
func TestWritersOutrunThePartitions(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	seq := func(from, count int) {
		t.Helper()
		for _, agg := range []string{"k", "m"} {
			if err := b.writeSeq(context.Background(), agg, from, count); err != nil {
				t.Fatal(err)
			}
		}
	}
	seq(0, 5)
	b.partition(t, 100) // ids 1-10 taken: the first partition ends at 200, the next at 300
	seq(5, 200)
	if n := b.count(t, `SELECT count(*) FROM outbox_default`); n != 111 {
		t.Fatalf("%d rows in the default partition, want ids 300-410", n)
	}
	pub := newGroupPublisher(0, 0)
	r := b.newRelayWith(t, pub, Config{Table: b.db.Table(), ID: "r1", Logger: slog.New(slog.DiscardHandler),
		PollInterval: 10 * time.Millisecond, PruneInterval: time.Hour, Retention: time.Millisecond})
	ready(t, r)
	if _, err := r.Prune(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The highest id is 410: partitions from 600, past the rows in the
	// default one and those in flight.
	if n := b.count(t, `SELECT count(to_regclass('outbox_p600')) + count(to_regclass('outbox_p700'))`); n != 2 {
		t.Fatalf("%d of outbox_p600 and outbox_p700 created", n)
	}
	stop := testkit.Run(t, r.Run)
	seq(205, 100) // ids 411-610: the default partition, then outbox_p600
	testkit.WaitFor(t, time.Minute, "every event published", func() bool {
		return b.publishedRows(t) == 610
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	pub.checkOrder(t, "orders", 305, "k", "m")
	if n := b.count(t, `SELECT count(*) FROM outbox_p600`); n != 11 {
		t.Fatalf("%d rows in outbox_p600, want 11", n)
	}
	if _, err := r.Prune(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_default`); n != 0 {
		t.Fatalf("%d rows left in the default partition after a prune", n)
	}
}

// Retention drops whole partitions below the claim floor whose rows are all
// published past retention; a dead row keeps its partition, whose
// published rows are then pruned one by one, and the claim's ordering rule
// holds across partitions: a retry in backoff in an older partition holds
// back its aggregate's later rows in a newer one.
func TestPartitionsPastRetentionAreDropped(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.partition(t, 100) // the first partition ends at 200, the next at 300
	b.write(t, 140, "k", "m")
	r := b.newRelayWith(t, nopPublisher{}, Config{Table: b.db.Table(), ID: "r1", Logger: slog.New(slog.DiscardHandler),
		Retention: time.Hour})
	ready(t, r)
	if _, err := r.Prune(context.Background()); err != nil { // creates the partitions up to 500
		t.Fatal(err)
	}
	b.write(t, 10, "k", "m") // up to id 300, in outbox_p300
	// Row 250 (aggregate m) fails; m's later rows, in outbox_p300, wait.
	b.exec(t, `UPDATE outbox SET attempts = 1, retry_at = now() + interval '1 hour', next_attempt_at = now() + interval '1 hour' WHERE id = 250`)
	b.exec(t, `UPDATE outbox SET state = 'published', published_at = now() - interval '2 hours' WHERE id < 250`)
	claimed := claimUpTo(t, r, 1000)
	if want := "251 253"; len(claimed) < len(want) || claimed[:len(want)] != want {
		t.Fatalf("claimed %q; want k's rows from 251 on and none of m's past 250", claimed)
	}
	b.exec(t, `UPDATE outbox SET state = 'dead' WHERE id = 150`)
	b.exec(t, `UPDATE outbox SET state = 'published', published_at = now() - interval '2 hours', lease_owner = NULL, attempts = 0, retry_at = '-infinity'`+
		` WHERE state <> 'dead'`)
	raiseFloor(t, b, r, 301)
	if _, err := r.Prune(context.Background()); err != nil {
		t.Fatal(err)
	}
	// outbox_p0 (ids below 200) is kept by row 150, and pruned to it;
	// outbox_p200 is dropped; outbox_p300 is above the floor.
	if n := b.count(t, `SELECT count(to_regclass('outbox_p200'))`); n != 0 {
		t.Fatal("outbox_p200 not dropped")
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_p0`); n != 1 {
		t.Fatalf("%d rows left in outbox_p0, want the dead one", n)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_p300`); n != 1 {
		t.Fatalf("%d rows in outbox_p300, want row 300 still there", n)
	}
}

// Dropping a partition locks the parent before the partition, as every
// claim, mark and writer does (and as DROP TABLE does for a partition):
// a claim that waits for the partition while the drop holds it locked,
// and holds the parent meanwhile, would otherwise deadlock with the
// drop's lock on the parent, and one of them would fail.
func TestPartitionDropDoesNotDeadlockWithAClaim(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.partition(t, 100) // the first partition ends at 200, the next at 300
	b.write(t, 5, "k", "m")
	b.exec(t, `UPDATE outbox SET state = 'published', published_at = now() - interval '2 hours'`)
	r := b.newRelayWith(t, nopPublisher{}, Config{Table: b.db.Table(), ID: "r1", Logger: slog.New(slog.DiscardHandler),
		Retention: time.Hour, StatementTimeout: 20 * time.Second})
	ready(t, r)
	ctx := context.Background()
	leaves, err := partitions.List(ctx, b.db.SQL, r.sql.names)
	if err != nil {
		t.Fatal(err)
	}
	// A reader of outbox_p0 alone keeps the drop waiting for it.
	release := b.lock(t, `SELECT count(*) FROM outbox_p0`)
	waiting := func(n int) func() bool {
		return func() bool {
			return b.count(t, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
				WHERE NOT l.granted AND d.datname = current_database()`) >= n
		}
	}
	swept := make(chan error, 1)
	go func() {
		_, _, err := partitions.Sweep(ctx, b.db.SQL, r.sql.names, leaves[:1], 300, time.Hour,
			partitions.Timeouts{Lock: 20 * time.Second, Statement: 20 * time.Second})
		swept <- err
	}()
	testkit.WaitFor(t, 10*time.Second, "the drop waiting", waiting(1))
	claimed := make(chan error, 1)
	go func() {
		_, err := r.claimer.claim(ctx, 10)
		claimed <- err
	}()
	testkit.WaitFor(t, 10*time.Second, "the claim waiting", waiting(2))
	release()
	if err := <-claimed; err != nil {
		t.Errorf("claim during a partition's drop: %v", err)
	}
	if err := <-swept; err != nil {
		t.Errorf("drop: %v", err)
	}
	if n := b.count(t, `SELECT count(to_regclass('outbox_p0'))`); n != 0 {
		t.Error("outbox_p0 not dropped")
	}
}

// The floor round finds the claims' Low on a partitioned outbox: the start
// of the floor's partition, or of a partition wholly below the floor that
// holds a retry; on one table it stays 0 and the round
// does not list partitions again for partitionsRelist.
func TestFloorRoundFindsTheClaimsLow(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	r := b.readyRelay(t, "r1")
	ctx := context.Background()
	if err := r.floor.findLow(ctx); err != nil {
		t.Fatal(err)
	}
	if low := r.floor.low.Load(); low != 0 || r.floor.oneTableUntil.IsZero() {
		t.Fatalf("one table: low %d, next listing %v; want 0 and a minute on", low, r.floor.oneTableUntil)
	}
	b.partition(t, 100) // the first partition ends at 200, the next at 300
	b.write(t, 140, "k", "m")
	b.exec(t, `UPDATE outbox SET state = 'published', published_at = now() WHERE id < 250`)
	raiseFloor(t, b, r, 250)
	r.floor.oneTableUntil = time.Time{} // as a minute on
	if err := r.floor.findLow(ctx); err != nil {
		t.Fatal(err)
	}
	if low := r.floor.low.Load(); low != 200 {
		t.Fatalf("low %d, want 200, the start of the floor's partition", low)
	}
	b.exec(t, `UPDATE outbox SET state = 'pending', published_at = NULL, attempts = 1, retry_at = now() + interval '1 hour',
		next_attempt_at = now() + interval '1 hour' WHERE id = 150`)
	if err := r.floor.findLow(ctx); err != nil {
		t.Fatal(err)
	}
	if low := r.floor.low.Load(); low != 0 {
		t.Fatalf("low %d, want 0, the start of the retry's partition", low)
	}
}
