package relaytest_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxtest"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/relaytest"
)

func write(t *testing.T, db *sql.DB, events ...txoutbox.Event) {
	t.Helper()
	// The default table: db's search_path is the test's schema.
	testkit.Commit(t, context.Background(), db, testkit.NewWriter(t, txoutbox.Table{}), events...)
}

func event(t *testing.T, topic, aggregateID, typ string) txoutbox.Event {
	t.Helper()
	ev, err := txoutbox.NewEvent(topic, "order", aggregateID, typ, map[string]any{"order": aggregateID})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// drain is Drain, logging how long it took.
func drain(t *testing.T, ctx context.Context, db *sql.DB, pub *relaytest.Publisher, cfg relay.Config) error {
	t.Helper()
	start := time.Now()
	err := relaytest.Drain(ctx, db, pub, cfg)
	t.Logf("Drain took %s", time.Since(start).Round(time.Millisecond))
	return err
}

func TestDrainPublishesEveryEventWithItsKeyAndHeadersAndMarksIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.NewOutbox(t)
	placed := event(t, "orders", "1", "order.placed")
	placed.Headers = map[string]string{"tenant": "eu"}
	write(t, db.SQL, placed, event(t, "orders", "2", "order.placed"), event(t, "orders", "1", "order.paid"), event(t, "payments", "1", "payment.taken"))

	pub := relaytest.NewPublisher()
	if err := drain(t, ctx, db.SQL, pub, relay.Config{}); err != nil {
		t.Fatal(err)
	}
	got := pub.Messages()
	if len(got) != 4 {
		t.Fatalf("published %d messages, want 4", len(got))
	}
	var ofOne []string
	for _, m := range got {
		if m.Key != m.Metadata.Get(txoutbox.HeaderAggregateID) || m.UUID != m.Metadata.Get(txoutbox.HeaderEventID) {
			t.Errorf("message %s: key %q, metadata %v", m.UUID, m.Key, m.Metadata)
		}
		if m.Key == "1" && m.Topic == "orders" {
			ofOne = append(ofOne, m.EventType())
		}
		if m.UUID == placed.ID.String() && (m.Metadata.Get("tenant") != "eu" || m.Topic != "orders" || string(m.Payload) != `{"order":"1"}`) {
			t.Errorf("order.placed of 1 published as %s %v %s", m.Topic, m.Metadata, m.Payload)
		}
	}
	if strings.Join(ofOne, ",") != "order.placed,order.paid" {
		t.Errorf("aggregate 1's orders events published as %v", ofOne)
	}
	if p := pub.Topic("payments"); len(p) != 1 || p[0].EventType() != "payment.taken" {
		t.Errorf("payments: %+v", p)
	}
	// Every row is marked: Drain returned after the relay recorded them.
	outboxtest.RequireNoEvent(ctx, t, db.SQL, outboxtest.Want{State: outboxtest.StatePending})
	outboxtest.RequireEvents(ctx, t, db.SQL,
		outboxtest.Want{AggregateID: "1", Topic: "orders", State: outboxtest.StatePublished},
		outboxtest.Want{AggregateID: "2", State: outboxtest.StatePublished},
		outboxtest.Want{AggregateID: "1", Topic: "orders", State: outboxtest.StatePublished},
	)

	// A drained outbox: Drain returns at once, publishing nothing again.
	pub.Reset()
	if err := drain(t, ctx, db.SQL, pub, relay.Config{}); err != nil || len(pub.Messages()) != 0 {
		t.Fatalf("second drain: %v, %d messages", err, len(pub.Messages()))
	}
}

func TestDrainRetriesAnEventRefusedForAnOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.NewOutbox(t)
	write(t, db.SQL, event(t, "orders", "1", "order.placed"), event(t, "orders", "1", "order.paid"))
	pub := relaytest.NewPublisher()
	pub.Fail(relaytest.Failure{EventType: "order.placed", Times: 2})
	if err := drain(t, ctx, db.SQL, pub, relay.Config{}); err != nil {
		t.Fatal(err)
	}
	if r := pub.Refused(); len(r) != 2 || r[0].EventType() != "order.placed" {
		t.Fatalf("refused %+v, want order.placed twice", r)
	}
	if m := pub.Messages(); len(m) != 2 || m[0].EventType() != "order.placed" || m[1].EventType() != "order.paid" {
		t.Fatalf("published %+v, want placed then paid", m)
	}
	e := outboxtest.RequireEvent(ctx, t, db.SQL, outboxtest.Want{Type: "order.placed", State: outboxtest.StatePublished})
	if e.Attempts != 2 || !strings.Contains(e.LastError, "relaytest: publish refused") {
		t.Fatalf("order.placed: %d attempts, last error %q", e.Attempts, e.LastError)
	}
}

func TestDrainReportsTheEventsThatWentDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.NewOutbox(t)
	write(t, db.SQL, event(t, "orders", "1", "order.placed"), event(t, "orders", "2", "order.placed"), event(t, "orders", "3", "order.paid"))
	pub := relaytest.NewPublisher()
	pub.Fail(relaytest.Failure{EventType: "order.placed", Err: errors.New("message too large"), Permanent: true})
	err := drain(t, ctx, db.SQL, pub, relay.Config{MaxAttempts: 3})
	if !errors.Is(err, relaytest.ErrDead) || errors.Is(err, relaytest.ErrNotDrained) {
		t.Fatalf("Drain: %v, want ErrDead", err)
	}
	for _, want := range []string{"relaytest: events went dead: 2:", "orders order.placed order/1 dead attempts=3", "order/2", "message too large"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	if m := pub.Messages(); len(m) != 1 || m[0].EventType() != "order.paid" {
		t.Fatalf("published %+v", m)
	}
	outboxtest.RequireEvents(ctx, t, db.SQL,
		outboxtest.Want{AggregateID: "1", State: outboxtest.StateDead},
		outboxtest.Want{AggregateID: "2", State: outboxtest.StateDead})

	// The dead events were reported once: a later drain is clean.
	write(t, db.SQL, event(t, "orders", "4", "order.paid"))
	if err := drain(t, ctx, db.SQL, pub, relay.Config{MaxAttempts: 3}); err != nil {
		t.Fatalf("second drain: %v", err)
	}
}

func TestDrainGivesUpOnAnOutageWithWhatIsLeft(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	write(t, db.SQL, event(t, "orders", "1", "order.placed"), event(t, "payments", "2", "payment.taken"))
	pub := relaytest.NewPublisher()
	pub.Fail(relaytest.Failure{Topic: "orders"}) // an outage that does not end
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := drain(t, ctx, db.SQL, pub, relay.Config{})
	if !errors.Is(err, relaytest.ErrNotDrained) || errors.Is(err, relaytest.ErrDead) {
		t.Fatalf("Drain: %v, want ErrNotDrained", err)
	}
	for _, want := range []string{"1 events unpublished (context deadline exceeded)", "orders order.placed order/1 pending attempts=", "relaytest: publish refused (event "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	if m := pub.Messages(); len(m) != 1 || m[0].Topic != "payments" {
		t.Fatalf("published %+v, want the payment only", m)
	}
	pub.Heal()
	if err := drain(t, context.Background(), db.SQL, pub, relay.Config{}); err != nil {
		t.Fatalf("after Heal: %v", err)
	}
	outboxtest.RequireNoEvent(context.Background(), t, db.SQL, outboxtest.Want{State: outboxtest.StatePending})
}

func TestDrainRefusesABadConfig(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	for _, cfg := range []relay.Config{{BatchSize: -1}, {Table: txoutbox.Table{Name: "x; drop table y"}}} {
		if err := relaytest.Drain(context.Background(), db.SQL, relaytest.NewPublisher(), cfg); !errors.Is(err, relay.ErrInvalidConfig) {
			t.Errorf("Drain(%+v): %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if err := relaytest.Drain(context.Background(), nil, relaytest.NewPublisher(), relay.Config{}); !errors.Is(err, relay.ErrInvalidConfig) {
		t.Errorf("Drain(nil db): %v", err)
	}
}

// delayed is event with NotBefore d from now.
func delayed(t *testing.T, topic, aggregateID, typ string, d time.Duration) txoutbox.Event {
	t.Helper()
	ev := event(t, topic, aggregateID, typ)
	ev.NotBefore = time.Now().Add(d)
	return ev
}

// types is the event types of what pub published, in order.
func types(pub *relaytest.Publisher) string {
	var out []string
	for _, m := range pub.Messages() {
		out = append(out, m.EventType())
	}
	return strings.Join(out, ",")
}

// An event delayed to a time before Drain's deadline is waited for and
// published, though nothing else is left.
func TestDrainWaitsForAnEventDueBeforeItsDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.NewOutbox(t)
	write(t, db.SQL, delayed(t, "orders", "1", "order.reminder", 300*time.Millisecond))
	pub := relaytest.NewPublisher()
	if err := drain(t, ctx, db.SQL, pub, relay.Config{}); err != nil {
		t.Fatal(err)
	}
	if got := types(pub); got != "order.reminder" {
		t.Fatalf("published %q, want the reminder", got)
	}
	outboxtest.RequireNoEvent(ctx, t, db.SQL, outboxtest.Want{State: outboxtest.StatePending})
}

// When all that is left is an event delayed past Drain's deadline and the
// event of its aggregate held behind it, Drain returns at once, with
// ErrScheduled, saying why each is not published.
func TestDrainSaysWhatIsScheduledAfterItsDeadline(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	write(t, db.SQL, delayed(t, "orders", "1", "order.reminder", time.Hour), event(t, "orders", "1", "order.paid"),
		event(t, "orders", "2", "order.placed"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub := relaytest.NewPublisher()
	err := drain(t, ctx, db.SQL, pub, relay.Config{})
	if !errors.Is(err, relaytest.ErrNotDrained) || !errors.Is(err, relaytest.ErrScheduled) || errors.Is(err, relaytest.ErrDead) {
		t.Fatalf("Drain: %v, want ErrNotDrained and ErrScheduled", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Drain waited for its deadline, though nothing left could be published before it")
	}
	for _, want := range []string{"2 events unpublished (all scheduled after the deadline",
		"#1 orders order.reminder order/1 pending not-before=", "← scheduled for ", " (in ", ", after the deadline)",
		"#2 orders order.paid order/1 pending payload={\"order\":\"1\"}  ← held behind #1, scheduled for "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	if got := types(pub); got != "order.placed" {
		t.Fatalf("published %q, want the other aggregate's event only", got)
	}
}

// WithClock publishes the events delayed up to its time at once, those
// held behind them after them, and leaves their NotBefore as written.
func TestDrainWithClockPublishesEventsDelayedUpToIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.NewOutbox(t)
	reminder := delayed(t, "orders", "1", "order.reminder", 24*time.Hour)
	write(t, db.SQL, reminder, event(t, "orders", "1", "order.paid"))
	pub := relaytest.NewPublisher()
	tomorrow := func() time.Time { return time.Now().Add(25 * time.Hour) }
	if err := relaytest.Drain(ctx, db.SQL, pub, relay.Config{}, relaytest.WithClock(tomorrow)); err != nil {
		t.Fatal(err)
	}
	if got := types(pub); got != "order.reminder,order.paid" {
		t.Fatalf("published %q, want the reminder, then the event held behind it", got)
	}
	e := outboxtest.RequireEvent(ctx, t, db.SQL, outboxtest.Want{Type: "order.reminder", State: outboxtest.StatePublished})
	if !e.NotBefore.Equal(reminder.NotBefore.Truncate(time.Microsecond)) {
		t.Fatalf("NotBefore %v after the drain, want %v as written", e.NotBefore, reminder.NotBefore)
	}
}
