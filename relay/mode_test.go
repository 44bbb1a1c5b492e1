package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// slotByHand makes a pgoutput slot under the WAL relay's default name for
// the bundle's table, as a WAL relay leaves it, and drops it at cleanup.
func (b *internalBundle) slotByHand(t *testing.T) (drop func()) {
	t.Helper()
	slot := outboxsql.WALName(b.db.Database(), b.db.Schema, "")
	b.exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
	drop = func() {
		_, _ = b.db.SQL.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
	}
	t.Cleanup(drop)
	return drop
}

// A polling relay does not start on a table a WAL relay's slot streams,
// and one running when such a slot appears claims from no shard until it
// is gone: both modes would publish every event.
func TestRelayRefusesATableTheWALRelayStreams(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	drop := b.slotByHand(t)
	r := b.newRelay(t, "r1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Run(ctx); !errors.Is(err, ErrWALStreams) {
		t.Fatalf("Run = %v, want ErrWALStreams", err)
	}
	drop()

	if _, err := r.members.round(ctx); err != nil {
		t.Fatal(err)
	}
	if r.members.owned.Load() == 0 {
		t.Fatal("the relay owns no shard without a slot")
	}
	b.slotByHand(t)
	if _, err := r.members.round(ctx); !errors.Is(err, ErrWALStreams) {
		t.Fatalf("round = %v, want ErrWALStreams", err)
	}
	if _, shards := r.members.claimable(); len(shards) != 0 {
		t.Fatalf("the relay claims from %d shards while a WAL relay's slot streams", len(shards))
	}
}

// A round looks for the slot holding the WAL gate shared: while a WAL
// relay holds it to make its slot, the round waits, and one that times out
// claims nothing.
func TestRoundWaitsForTheWALGate(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	r := b.newRelay(t, "r1")
	ctx := context.Background()
	round(t, r)
	release := b.lock(t, `SELECT pg_advisory_xact_lock(hashtext('txoutbox.wal.gate'), ('`+b.db.Table().String()+`'::regclass::oid::bigint - 2147483648)::int)`)
	defer release()
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := r.members.round(short); err == nil {
		t.Fatal("a round passed the WAL gate held exclusively")
	}
	if _, shards := r.members.claimable(); len(shards) != 0 {
		t.Fatalf("the relay claims from %d shards after a round that could not look for slots", len(shards))
	}
}

// Only a WAL relay's slot stops the claims: one named in a WAL relay's
// marker on a publication of the table does, whatever its name; one merely
// named as a publication of the table (a native subscription's) does not.
func TestRelayTellsAWALRelaysSlotFromOtherReplication(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	ctx := context.Background()
	r := b.newRelay(t, "r1")
	pub := "sub_" + b.db.Schema
	b.exec(t, `CREATE PUBLICATION "`+pub+`" FOR TABLE "`+b.db.Schema+`".outbox`)
	t.Cleanup(func() { _, _ = b.db.SQL.Exec(`DROP PUBLICATION IF EXISTS "` + pub + `"`) })
	b.exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, pub)
	t.Cleanup(func() {
		_, _ = b.db.SQL.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, pub)
	})
	if _, err := r.members.round(ctx); err != nil {
		t.Fatalf("round beside a subscription's slot = %v, want the relay to claim", err)
	}
	b.exec(t, `COMMENT ON PUBLICATION "`+pub+`" IS 'txoutbox: slot `+pub+` up to 0/1 publication x settled 0'`)
	if _, err := r.members.round(ctx); !errors.Is(err, ErrWALStreams) {
		t.Fatalf("round beside a WAL relay's slot (by its marker) = %v, want ErrWALStreams", err)
	}
}
