package relay

import (
	"log/slog"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// A NOTIFY for one row costs the claim that takes it and a few empty polls
// in the hotPollWindow after it (two), and then nothing until the next
// NOTIFY or PollInterval: with a hundred tables written ten times a second
// each, the empty polls were most of a group's statements. The row's mark
// freeing room is no reason to claim: the claim that took it took every
// due row, its aggregate's later ones included.
func TestNotifyCostsAFewPollsThenNone(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	db, st := b.db.Traced(t)
	// Acknowledged between the first hot poll and the window's end, so a
	// claim when the mark frees room would be one more.
	r, err := New(db, slowPublisher(40*time.Millisecond), Config{Table: b.db.Table(), ID: "r1", PollInterval: time.Minute,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	names, err := outboxsql.NamesFor(b.db.Table().Schema, b.db.Table().Name)
	if err != nil {
		t.Fatal(err)
	}
	claim := names.Render(outboxsql.Claim)
	mark := "set_config('synchronous_commit', 'off', true)" // the mark's async commit
	defer start(t, r)()
	// Wait until the relay listens and its start-up claims have ended.
	if !testkit.Eventually(10*time.Second, func() bool {
		return len(st.Matching("LISTEN ", time.Time{})) > 0 && len(st.Matching(claim, time.Time{})) > 0 &&
			len(st.Matching(claim, time.Now().Add(-hotPollWindow-300*time.Millisecond))) == 0
	}) {
		t.Fatal("the relay did not settle")
	}
	for i := range 3 {
		from := time.Now()
		b.write(t, 1, "k")
		b.waitPublished(t, 10*time.Second, i+1)
		time.Sleep(hotPollWindow + time.Second) // about time: the claims in the second after the NOTIFY
		claims := st.Matching(claim, from)
		if len(claims) < 2 || len(claims) > 3 {
			t.Fatalf("NOTIFY %d: %d claims in the second after it, want the one that took the row and one or two empty polls", i+1, len(claims))
		}
		if len(st.Matching(mark, from)) == 0 {
			t.Fatalf("NOTIFY %d: the row published but no mark traced", i+1)
		}
		// The last poll comes at the end of the window after the claim
		// that took the row, not when its mark frees room.
		until := claims[0].End.Add(hotPollWindow)
		if late := claims[len(claims)-1].Start.Sub(until); late > 200*time.Millisecond {
			t.Fatalf("NOTIFY %d: a claim %s past the %s window", i+1, late, hotPollWindow)
		}
	}
}

// While the service commits a row every few milliseconds, each claim that
// comes back short is followed by the next no sooner than ClaimCooldown
// after it began: the rows of a cooldown go in one claim (and one mark)
// instead of a claim at every NOTIFY and hot poll. A full claim is
// followed at once, so a backlog drains without waiting.
func TestClaimCooldownGathersAStream(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	db, st := b.db.Traced(t)
	const cooldown, batch = 200 * time.Millisecond, 50
	r, err := New(db, nopPublisher{}, Config{Table: b.db.Table(), ID: "r1", PollInterval: time.Minute, ClaimCooldown: cooldown,
		// Room for many batches in flight: a claim is full at the batch,
		// not at the room left while marks wait on a loaded machine.
		BatchSize: batch, MaxInFlight: 20 * batch, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	names, err := outboxsql.NamesFor(b.db.Table().Schema, b.db.Table().Name)
	if err != nil {
		t.Fatal(err)
	}
	claim := names.Render(outboxsql.Claim)
	defer start(t, r)()
	testkit.WaitFor(t, 10*time.Second, "the relay's first claim", func() bool { return len(st.Matching(claim, time.Time{})) > 0 })

	// A stream: a row every 10ms for 1.5s (20 in a cooldown, fewer than a
	// batch), each commit announced (at most one NOTIFY per
	// NotifyInterval) and found by the hot polls.
	from := time.Now()
	const streamed = 150
	for range streamed {
		b.write(t, 1, "k")
		time.Sleep(10 * time.Millisecond)
	}
	b.waitPublished(t, 10*time.Second, streamed)
	claims := st.Matching(claim, from)
	if len(claims) < 2 {
		t.Fatalf("%d claims for %d rows streamed over %s", len(claims), streamed, time.Since(from))
	}
	short := 0
	for i := 1; i < len(claims); i++ {
		if claims[i-1].Rows >= batch || claims[i-1].Err != nil {
			// Full (the writes bunched up on a loaded machine), or
			// failed: followed at once, or after the failure's backoff.
			continue
		}
		short++
		// The claimer times the cooldown from before it sends the claim,
		// the trace from the statement, which a loaded machine delays by
		// tens of milliseconds; so a gap may fall short of the cooldown by
		// that delay. Claims woken by every NOTIFY instead would be
		// NotifyIntervalDefault (50ms) apart, under half the cooldown.
		if gap := claims[i].Start.Sub(claims[i-1].Start); gap < cooldown/2 {
			t.Fatalf("claims %d (%d rows) and %d of the stream began %s apart, want about ClaimCooldown (%s), at least half",
				i-1, claims[i-1].Rows, i, gap, cooldown)
		}
	}
	if short == 0 {
		t.Fatalf("none of the stream's %d claims came back short", len(claims))
	}

	// A backlog of five full batches: one claim after another.
	from = time.Now()
	b.write(t, 250, "a")
	b.waitPublished(t, 10*time.Second, streamed+250)
	backlog := st.Matching(claim, from)
	if len(backlog) < 5 {
		t.Fatalf("%d claims for 250 rows in batches of %d", len(backlog), batch)
	}
	if d := backlog[4].Start.Sub(backlog[0].Start); d >= cooldown {
		t.Errorf("the backlog's five full claims spanned %s: a full claim waited for the cooldown (%s)", d, cooldown)
	}
}
