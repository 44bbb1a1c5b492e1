package relay

import (
	"log/slog"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// A NOTIFY for one row costs the claim that takes it and a few empty polls
// in the hotPollWindow after it (two, or three when the row's mark frees
// room between them), and then nothing until the next NOTIFY or
// PollInterval: with a hundred tables written ten times a second each, the
// empty polls were most of a group's statements.
func TestNotifyCostsAFewPollsThenNone(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	db, st := b.db.Traced(t)
	r, err := New(db, nopPublisher{}, Config{Table: b.db.Table(), ID: "r1", PollInterval: time.Minute,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	names, err := outboxsql.NamesFor(b.db.Table().Schema, b.db.Table().Name)
	if err != nil {
		t.Fatal(err)
	}
	claim := names.Render(outboxsql.Claim)
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
		time.Sleep(hotPollWindow + time.Second)
		claims := st.Matching(claim, from)
		if len(claims) < 2 || len(claims) > 4 {
			t.Fatalf("NOTIFY %d: %d claims in the second after it, want the one that took the row and one to three empty polls", i+1, len(claims))
		}
		if last := claims[len(claims)-1].Start.Sub(claims[0].End); last > hotPollWindow+300*time.Millisecond {
			t.Fatalf("NOTIFY %d: a claim %s after the first, past the %s window", i+1, last, hotPollWindow)
		}
	}
}
