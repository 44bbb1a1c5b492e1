package walrelay

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay"
)

// Takeover marks published exactly what the slot confirmed, leaves the
// rest pending and drops the slot; the polling relay then publishes the
// rest, and nothing the WAL relay confirmed goes out again.
func TestTakeoverHandsTheRestToThePollingRelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cfg := b.config()
	cfg.SenderTimeout = time.Second
	cfg.CleanupInterval = time.Hour // confirmed rows stay pending: takeover must tell them apart
	cfg.Lanes = 1                   // "held" blocks everything after it
	w := b.newRelay(t, cfg)
	stop := runActive(t, w)
	var confirmed []txoutbox.Event
	for range 5 {
		confirmed = append(confirmed, b.write(t, "a", "b")...)
	}
	b.pub.waitFor(t, confirmed...)
	var end string
	if err := b.db.SQL.QueryRowContext(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "slot confirmed past the first events", func() bool {
		return b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND confirmed_flush_lsn >= $2::pg_lsn`, w.cfg.Slot, end) == 1
	})
	held := b.events(t, "h")
	release := b.pub.holdEvent(held[0].ID.String())
	defer release()
	b.commit(t, held...)
	rest := b.write(t, "a", "c")
	time.Sleep(200 * time.Millisecond)
	go func() { time.Sleep(time.Second); release() }()
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	tc := TakeoverConfig{ConnString: b.db.URL, Table: b.db.Table()}
	res, err := Takeover(ctx, tc)
	if err != nil {
		t.Fatal(err)
	}
	if res.Confirmed != int64(len(confirmed)) || res.Unconfirmed != 3 || res.Lost {
		t.Fatalf("takeover %+v, want %d confirmed and 3 unconfirmed", res, len(confirmed))
	}
	if n := b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, w.cfg.Slot); n != 0 {
		t.Fatal("slot still exists")
	}
	if _, err := Takeover(ctx, tc); err == nil {
		t.Fatal("a second takeover found a slot")
	}

	polled := newRecorder()
	r, err := relay.New(b.db.SQL, polled, relay.Config{Table: b.db.Table(), PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(pctx) }()
	polled.waitFor(t, append(held, rest...)...)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, e := range confirmed {
		if slices.Contains(polled.ids(), e.ID.String()) {
			t.Errorf("confirmed event %s published again by the polling relay", e.ID)
		}
	}
}

// Takeover refuses while a relay streams from the slot.
func TestTakeoverRefusesAnActiveSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runActive(t, b.newRelay(t, b.config()))
	_, err := Takeover(context.Background(), TakeoverConfig{ConnString: b.db.URL, Table: b.db.Table()})
	if !errors.Is(err, ErrSlotActive) {
		t.Fatalf("Takeover: %v, want ErrSlotActive", err)
	}
}

// A relay that died while it initialised the slot leaves the
// publication's mark, and the rows written before the slot unpublished:
// the slot never streams them. Takeover must leave them pending for the
// polling relay, not mark them published as if the slot confirmed them.
func TestTakeoverAfterInterruptedInitialisationKeepsTheBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	old := b.write(t, "k", "l")
	slot, pub := SlotDefault(b.db.Table()), PublicationDefault(b.db.Table())
	b.exec(t, `CREATE PUBLICATION `+pub+` FOR TABLE `+b.db.Table().String()+` WITH (publish = 'insert')`)
	b.exec(t, `COMMENT ON PUBLICATION `+pub+` IS 'txoutbox: initialising slot `+slot+`'`)
	b.exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)

	res, err := Takeover(ctx, TakeoverConfig{ConnString: b.db.URL, Table: b.db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox WHERE state = 'pending'`); n != len(old) {
		t.Fatalf("takeover %+v left %d rows pending, want the %d rows the slot never streamed", res, n, len(old))
	}
}

// A writer may commit asynchronously (synchronous_commit = off): its
// commit is visible, and releases its lock, before its WAL is flushed, and
// the slot decodes only flushed WAL. Takeover must still see such a row
// as unconfirmed, not mark it published unsent.
func TestTakeoverSeesAsynchronousCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	slot, pub := SlotDefault(b.db.Table()), PublicationDefault(b.db.Table())
	b.exec(t, `CREATE PUBLICATION `+pub+` FOR TABLE `+b.db.Table().String()+` WITH (publish = 'insert')`)
	for i := range 5 {
		b.exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
		tx, err := b.db.SQL.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			t.Fatal(err)
		}
		ev := b.events(t, "k")
		if err := b.w.Write(ctx, tx, ev...); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		res, err := Takeover(ctx, TakeoverConfig{ConnString: b.db.URL, Table: b.db.Table()})
		if err != nil {
			t.Fatal(err)
		}
		if n := b.count(t, `SELECT count(*) FROM outbox WHERE state = 'pending' AND event_id = $1`, ev[0].ID); n != 1 {
			t.Fatalf("round %d: takeover %+v marked the asynchronously committed row published; the slot never streamed it", i, res)
		}
	}
}
