package engines_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxtest"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/relaytest"
)

// relaytest.Drain on each engine, through its exported API.

// drainCase is an outbox of the test's own with a recording publisher.
type drainCase struct {
	db  *testkit.DB
	pub *relaytest.Publisher
}

func newDrainCase(t *testing.T, e testkit.Engine, events ...txoutbox.Event) drainCase {
	t.Helper()
	db := testkit.NewOutboxOn(t, e)
	testkit.Commit(t, context.Background(), db.SQL, db.Writer(t), events...)
	return drainCase{db: db, pub: relaytest.NewPublisher()}
}

func (c drainCase) drain(ctx context.Context, opts ...relaytest.DrainOption) error {
	return relaytest.Drain(ctx, c.db.SQL, c.pub, relay.Config{Table: c.db.Table()}, opts...)
}

// states returns the state of each event of the outbox by id.
func (c drainCase) states(t *testing.T) map[string]string {
	t.Helper()
	events, err := outboxtest.ReadEvents(context.Background(), outboxtest.InTable(c.db.SQL, c.db.Table()))
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]string, len(events))
	for _, e := range events {
		m[e.ID.String()] = e.State
	}
	return m
}

func ids(events ...txoutbox.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.ID.String()
	}
	return out
}

func TestDrainPublishesEveryEventAndMarksIt(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		events := []txoutbox.Event{event("1", 0), event("2", 0), event("1", 1), event("3", 0)}
		c := newDrainCase(t, e, events...)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := c.drain(ctx); err != nil {
			t.Fatal(err)
		}
		got := published(c.pub)
		states := c.states(t)
		for _, id := range ids(events...) {
			if !got[id] || states[id] != outboxtest.StatePublished {
				t.Errorf("event %s: published %t, state %s; want published and marked", id, got[id], states[id])
			}
		}
		checkOrder(t, c.pub.Messages())
	})
}

func TestDrainReportsDeadEvents(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		refused, fine := event("1", 1), event("2", 2)
		c := newDrainCase(t, e, refused, fine)
		c.pub.Fail(relaytest.Failure{EventID: refused.ID.String(), Permanent: true})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		err := c.drain(ctx)
		if !errors.Is(err, relaytest.ErrDead) || errors.Is(err, relaytest.ErrNotDrained) {
			t.Fatalf("Drain = %v, want ErrDead alone", err)
		}
		if states := c.states(t); states[refused.ID.String()] != outboxtest.StateDead || states[fine.ID.String()] != outboxtest.StatePublished {
			t.Fatalf("states %v, want the refused event dead and the other published", states)
		}
	})
}

func TestDrainStopsAtEventsScheduledAfterItsDeadline(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		reminder := event("1", 1)
		reminder.NotBefore = time.Now().Add(24 * time.Hour)
		behind, other := event("1", 2), event("2", 3)
		c := newDrainCase(t, e, reminder, behind, other)
		const timeout = 20 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		err := c.drain(ctx)
		if !errors.Is(err, relaytest.ErrScheduled) || !errors.Is(err, relaytest.ErrNotDrained) {
			t.Fatalf("Drain = %v, want ErrScheduled and ErrNotDrained", err)
		}
		if took := time.Since(start); took >= timeout/2 {
			t.Fatalf("Drain took %s: it waited for its deadline instead of returning once only scheduled events were left", took)
		}
		got := published(c.pub)
		if got[reminder.ID.String()] || got[behind.ID.String()] || !got[other.ID.String()] {
			t.Fatalf("published %v, want only the event of the other aggregate", got)
		}
	})
}

func TestDrainWithClockPublishesEventsScheduledByIt(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		reminder := event("1", 1)
		reminder.NotBefore = time.Now().Add(24 * time.Hour)
		behind := event("1", 2)
		c := newDrainCase(t, e, reminder, behind)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		tomorrow := func() time.Time { return time.Now().Add(25 * time.Hour) }
		if err := c.drain(ctx, relaytest.WithClock(tomorrow)); err != nil {
			t.Fatal(err)
		}
		msgs := c.pub.Messages()
		if len(msgs) != 2 || msgs[0].UUID != reminder.ID.String() || msgs[1].UUID != behind.ID.String() {
			t.Fatalf("published %d messages, want the reminder and then the event behind it", len(msgs))
		}
		if states := c.states(t); states[reminder.ID.String()] != outboxtest.StatePublished {
			t.Fatalf("reminder is %s, want published", states[reminder.ID.String()])
		}
	})
}
