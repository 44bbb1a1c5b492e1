package relay

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

// floorOf reads the table's claim floor.
func (b *internalBundle) floorOf(t *testing.T) int64 {
	t.Helper()
	var f int64
	if err := b.db.SQL.QueryRow(`SELECT floor FROM outbox_claim_floor`).Scan(&f); err != nil {
		t.Fatal(err)
	}
	return f
}

// raiseFloor runs r's floor rounds until the floor is want, each as if
// the quiet rounds had passed (floorQuietRounds): a proof every round.
func raiseFloor(t *testing.T, b *internalBundle, r *Relay, want int64) {
	t.Helper()
	raised := testkit.Eventually(time.Minute, func() bool {
		if b.floorOf(t) == want {
			return true
		}
		r.floor.lastStart = time.Time{}
		if err := r.floor.round(context.Background()); err != nil {
			t.Fatal(err)
		}
		return false
	})
	if !raised {
		t.Fatalf("claim floor %d after a minute of rounds, want %d", b.floorOf(t), want)
	}
}

// A relay's rounds raise the claim floor past the rows published, to the
// first one not, and claims go on from there; a replay below it lowers it,
// and the replayed rows are claimed in their aggregate's order.
func TestRelayRaisesTheClaimFloorPastThePublishedRows(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.write(t, 10, "k", "m") // 1..20
	b.exec(t, `UPDATE outbox SET state = 'published', published_at = now()`)
	b.write(t, 2, "k", "m") // 21..24
	r := b.readyRelay(t, "r1")
	raiseFloor(t, b, r, 21)
	if got := claimIDs(t, r); got != "21 22 23 24" {
		t.Fatalf("claimed %q above the floor, want 21 22 23 24", got)
	}
	b.exec(t, `UPDATE outbox SET state = 'published', published_at = now(), lease_owner = NULL, lease_expires_at = NULL WHERE id > 20`)
	raiseFloor(t, b, r, 25)
	b.exec(t, `UPDATE outbox SET state = 'pending', published_at = NULL, retry_at = '-infinity', next_attempt_at = now() WHERE id IN (3, 5)`)
	if got := claimIDs(t, r); got != "" {
		t.Fatalf("claimed %q: rows returned to pending by hand, without lowering the floor, are below it (the operators' commands lower it)", got)
	}
	b.exec(t, `UPDATE outbox_claim_floor SET floor = least(floor, 3), gen = gen + 1`) // what OpsLowerFloor does
	if got := claimIDs(t, r); got != "3 5" {
		t.Fatalf("claimed %q after the floor was lowered to them, want 3 5", got)
	}
}

// Run runs the rounds: the floor rises while the relay runs.
func TestRunRaisesTheClaimFloor(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.write(t, 5, "k") // 1..5
	r := b.newRelayWith(t, nopPublisher{}, Config{Table: b.db.Table(), HeartbeatInterval: 50 * time.Millisecond, StaleAfter: time.Second})
	start(t, r)
	if !testkit.Eventually(time.Minute, func() bool { return b.floorOf(t) == 6 }) {
		t.Fatalf("claim floor %d after a minute of Run, want 6: every row published", b.floorOf(t))
	}
}

// A relay that claimed fewer rows than a batch since its last proof starts
// none for floorQuietRounds rounds: in a group of a hundred tables each
// written ten times a second, a proof every round each read pg_locks two
// hundred times a second for floors that saved each claim a few entries.
func TestFloorRoundsWaitForABatchOfClaims(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.write(t, 2, "k") // 1, 2
	r := b.newRelayWith(t, nopPublisher{}, Config{Table: b.db.Table(), ID: "r1", BatchSize: 3})
	ready(t, r)
	ctx := context.Background()
	if err := r.floor.round(ctx); err != nil {
		t.Fatal(err)
	}
	if r.floor.proof == nil {
		t.Fatal("the first round started no proof")
	}
	r.floor.proof = nil // as if it had held and raised the floor
	if got := claimIDs(t, r); got != "1 2" {
		t.Fatalf("claimed %q, want 1 2", got)
	}
	if err := r.floor.round(ctx); err != nil {
		t.Fatal(err)
	}
	if r.floor.proof != nil {
		t.Fatal("a round started a proof after 2 rows claimed, fewer than the batch of 3")
	}
	b.write(t, 1, "k")
	if got := claimIDs(t, r); got != "3" {
		t.Fatalf("claimed %q, want 3", got)
	}
	if err := r.floor.round(ctx); err != nil {
		t.Fatal(err)
	}
	if r.floor.proof == nil {
		t.Fatal("no proof after a batch of rows claimed")
	}
	if n := r.floor.claimed.Load(); n != 0 {
		t.Fatalf("%d rows counted after the proof started, want 0", n)
	}
	r.floor.proof = nil
	r.floor.lastStart = time.Now().Add(-floorQuietRounds * r.cfg.HeartbeatInterval)
	if err := r.floor.round(ctx); err != nil {
		t.Fatal(err)
	}
	if r.floor.proof == nil {
		t.Fatal("no proof after the quiet rounds passed with no claim")
	}
}
