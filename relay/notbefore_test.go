package relay

// Events delivered not before a time (txoutbox.Event.NotBefore): the claim
// reads a scheduled row as a retry in backoff (retry_at is its NotBefore)
// until its time, and an aggregate's rows still go out in the order they
// were written, so a scheduled row holds back its aggregate's later rows.

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// writeAt commits one event per aggregate, delivered not before at.
func (b *internalBundle) writeAt(t *testing.T, at time.Time, aggs ...string) {
	t.Helper()
	var events []txoutbox.Event
	for _, agg := range aggs {
		e, err := txoutbox.NewEvent("orders", "order", agg, "order.reminder", agg)
		if err != nil {
			t.Fatal(err)
		}
		e.NotBefore = at
		events = append(events, e)
	}
	b.commit(t, events...)
}

// due makes the scheduled rows in ids due since a second ago, as if their
// time had come.
func (b *internalBundle) due(t *testing.T, ids string) {
	t.Helper()
	b.exec(t, `UPDATE outbox SET not_before = now() - interval '1 second', retry_at = now() - interval '1 second',
        next_attempt_at = now() - interval '1 second' WHERE id = ANY($1::bigint[])`, "{"+ids+"}")
}

// A scheduled row is not claimed before its time, and holds back the later
// rows of its aggregate, not those of others; once due it is claimed as a
// first attempt (attempts 0), ahead of its aggregate's later rows.
func TestClaimWaitsForNotBeforeAndHoldsBackItsAggregate(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.write(t, 1, "k", "m")                      // 1 k, 2 m
	b.writeAt(t, time.Now().Add(time.Hour), "k") // 3 k, in an hour
	b.write(t, 1, "k", "m")                      // 4 k, 5 m
	r := b.readyRelay(t, "r1")
	if got := claimIDs(t, r); got != "1 2 5" {
		t.Fatalf("claimed %q, want 1 2 5: k's row 4 waits behind row 3, scheduled in an hour; m goes on", got)
	}
	if got := claimIDs(t, r); got != "" {
		t.Fatalf("claimed %q again before row 3's time, want nothing", got)
	}
	b.due(t, "3")
	rows, err := r.claimer.claim(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].id != 3 || rows[1].id != 4 || rows[0].attempts != 0 {
		t.Fatalf("claimed %d rows once row 3 is due, want 3 (attempts 0) then 4", len(rows))
	}
}

// The order is the order written, not the order of the times: a row
// scheduled later but written first holds back one written after it and
// due sooner.
func TestScheduledRowsOfAnAggregateGoInTheOrderWritten(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.writeAt(t, time.Now().Add(2*time.Hour), "k") // 1
	b.writeAt(t, time.Now().Add(time.Hour), "k")   // 2
	r := b.readyRelay(t, "r1")
	b.due(t, "2")
	if got := claimIDs(t, r); got != "" {
		t.Fatalf("claimed %q with row 2 due and row 1 not, want nothing: row 1 was written first", got)
	}
	b.due(t, "1")
	if got := claimIDs(t, r); got != "1 2" {
		t.Fatalf("claimed %q once both are due, want 1 2", got)
	}
}

// A scheduled row claimed once due by an incarnation that died (its
// publish lost with it) is claimed again, in order, by the next one, and a
// failed publish of it makes it an ordinary retry: attempts 1, its
// backoff in retry_at, no longer scheduled.
func TestDueScheduledRowSurvivesARelayThatDied(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.writeAt(t, time.Now().Add(time.Hour), "k") // 1
	b.write(t, 1, "k")                           // 2
	b.due(t, "1")
	dead := b.readyRelay(t, "r1")
	if got := claimIDs(t, dead); got != "1 2" {
		t.Fatalf("first incarnation claimed %q, want 1 2", got)
	}
	// It dies mid-publish: its heartbeat row goes (as StaleAfter ends it).
	b.exec(t, `DELETE FROM outbox_relays`)
	r := b.readyRelay(t, "r2")
	rows, err := r.claimer.claim(context.Background(), 10)
	if err != nil || len(rows) != 2 || rows[0].id != 1 || rows[1].id != 2 {
		t.Fatalf("the next incarnation claimed %d rows (%v), want 1 then 2", len(rows), err)
	}
	args, err := outboxsql.FailArgs{Failures: []outboxsql.Failure{{ID: rows[0].id, Owner: rows[0].inc.token, Err: "broker away", DelayMS: 60_000}},
		MaxAttempts: 10}.Args()
	if err != nil {
		t.Fatal(err)
	}
	b.exec(t, r.sql.fail, args...)
	var attempts int
	var backoff bool
	if err := b.db.SQL.QueryRow(`SELECT attempts, retry_at > now() FROM outbox WHERE id = 1`).Scan(&attempts, &backoff); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || !backoff {
		t.Fatalf("after a failed publish: attempts %d, in backoff %v; want 1, true", attempts, backoff)
	}
	st, err := txoutbox.ReadStats(context.Background(), b.db.SQL, b.db.Table())
	if err != nil {
		t.Fatal(err)
	}
	if st.Scheduled != 0 || st.Backlog != 2 {
		t.Fatalf("stats after the failure: %+v; want 0 scheduled, backlog 2 (a retry is backlog)", st)
	}
}

// recordingPublisher keeps the event ids it was given, with the time.
type recordingPublisher struct {
	mu  sync.Mutex
	got []published
}

type published struct {
	id string
	at time.Time
}

func (p *recordingPublisher) Publish(_ string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.got = append(p.got, published{id: m.UUID, at: time.Now()})
	}
	return nil
}
func (*recordingPublisher) Close() error { return nil }

func (p *recordingPublisher) published() []published {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]published(nil), p.got...)
}

// The relay publishes a delayed event no earlier than its NotBefore and
// within its PollInterval of it (plus a claim), and the aggregate's later
// event after it; another aggregate's event goes at once. The relay is
// stopped and replaced by a new run while the event waits, which changes
// nothing.
func TestRelayPublishesNotBeforeItsTime(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	pub := &recordingPublisher{}
	const poll = 100 * time.Millisecond
	run := func(id string) (stop func()) {
		return start(t, b.newRelayWith(t, pub, Config{Table: b.db.Table(), ID: id, Logger: slog.New(slog.DiscardHandler),
			PollInterval: poll, HeartbeatInterval: 100 * time.Millisecond, StaleAfter: time.Second}))
	}
	stop := run("r1")
	notBefore := time.Now().Add(1500 * time.Millisecond)
	reminder, err := txoutbox.NewEvent("orders", "order", "k", "order.reminder", 1)
	if err != nil {
		t.Fatal(err)
	}
	reminder.NotBefore = notBefore
	later, _ := txoutbox.NewEvent("orders", "order", "k", "order.shipped", 2)
	other, _ := txoutbox.NewEvent("orders", "order", "m", "order.placed", 3)
	b.commit(t, reminder, later, other)
	testkit.WaitFor(t, 10*time.Second, "the other aggregate's event published", func() bool { return len(pub.published()) > 0 })
	if got := pub.published(); len(got) != 1 || got[0].id != other.ID.String() {
		t.Fatalf("published %v before the reminder's time, want only the other aggregate's event", got)
	}
	stop()
	run("r1") // a new run, a new incarnation, while the reminder waits
	testkit.Eventually(10*time.Second, func() bool { return len(pub.published()) >= 3 })
	got := pub.published()
	if len(got) != 3 || got[1].id != reminder.ID.String() || got[2].id != later.ID.String() {
		t.Fatalf("published %v, want the other event, the reminder, then the aggregate's later event", got)
	}
	if got[1].at.Before(notBefore) {
		t.Fatalf("the reminder went out %s before its NotBefore", notBefore.Sub(got[1].at))
	}
	// Its time, then the next poll and a claim; generous for a loaded CI
	// machine, and far below the 1.5s it was delayed.
	if late := got[1].at.Sub(notBefore); late > poll+time.Second {
		t.Fatalf("the reminder went out %s after its NotBefore, want within the poll interval (%s) and a claim", late, poll)
	}
	// The mark commits after the acknowledgement: wait for it.
	var early sql.NullBool
	testkit.Eventually(10*time.Second, func() bool {
		if err := b.db.SQL.QueryRow(`SELECT published_at < not_before FROM outbox WHERE event_id = $1`, reminder.ID.String()).Scan(&early); err != nil {
			t.Fatal(err)
		}
		return early.Valid
	})
	if !early.Valid || early.Bool {
		t.Fatalf("published before not_before by the database clock (or never marked): %+v", early)
	}
}
