package outboxtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/txoutbox/txoutbox/internal/human"
)

// TB is what the assertions need of a test: testing.TB has it. A failed
// assertion calls Fatalf once and returns zero values, so a TB whose
// Fatalf does not stop the goroutine (a fake one, in tests of the
// assertions) sees the failure and nothing after it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// shownEvents is the most events a failure message lists.
const shownEvents = 20

// RequireEvent fails tb unless exactly one event of the outbox q reads
// matches want, and returns it. The failure lists the outbox's events,
// each with why it does not match.
func RequireEvent(ctx context.Context, tb TB, q Querier, want Want) Event {
	tb.Helper()
	events, ok := read(ctx, tb, q)
	if !ok {
		return Event{}
	}
	var matched []Event
	for _, e := range events {
		if want.mismatch(e) == "" {
			matched = append(matched, e)
		}
	}
	switch len(matched) {
	case 1:
		return matched[0]
	case 0:
		tb.Fatalf("outboxtest: no event matches %s; %s", want, listed(events, want))
	default:
		tb.Fatalf("outboxtest: %d events match %s, want exactly one (narrow the Want, or use RequireEvents):\n%s",
			len(matched), want, lines(matched, nil))
	}
	return Event{}
}

// RequireNoEvent fails tb if an event of the outbox q reads matches want;
// RequireNoEvent(ctx, t, q, Want{}) requires an empty outbox.
func RequireNoEvent(ctx context.Context, tb TB, q Querier, want Want) {
	tb.Helper()
	events, ok := read(ctx, tb, q)
	if !ok {
		return
	}
	var matched []Event
	for _, e := range events {
		if want.mismatch(e) == "" {
			matched = append(matched, e)
		}
	}
	if len(matched) > 0 {
		tb.Fatalf("outboxtest: want no event matching %s, found %d:\n%s", want, len(matched), lines(matched, nil))
	}
}

// RequireEvents fails tb unless the events of the outbox q reads that
// match any of wants are exactly as many as wants and, in the order they
// were written, each matches its Want: wants[0] the first, and so on.
// Events that match none of wants are left out, so an unrelated event
// does not break the test; an extra event of a kind wanted does. It
// returns the events matched, in order.
//
// Order is the order of writing (Event.Seq), which the relay keeps per
// aggregate.
func RequireEvents(ctx context.Context, tb TB, q Querier, wants ...Want) []Event {
	tb.Helper()
	if len(wants) == 0 {
		tb.Fatalf("outboxtest: RequireEvents without a Want (RequireNoEvent with Want{} requires an empty outbox)")
		return nil
	}
	events, ok := read(ctx, tb, q)
	if !ok {
		return nil
	}
	var considered []Event
	for _, e := range events {
		for _, w := range wants {
			if w.mismatch(e) == "" {
				considered = append(considered, e)
				break
			}
		}
	}
	bad := len(considered) != len(wants)
	why := make([]string, len(considered))
	for i, e := range considered {
		switch {
		case i >= len(wants):
			why[i] = "an extra event"
			bad = true
		case wants[i].mismatch(e) != "":
			why[i] = fmt.Sprintf("not %d. (%s)", i+1, wants[i].mismatch(e))
			bad = true
		}
	}
	if !bad {
		return considered
	}
	var b strings.Builder
	fmt.Fprintf(&b, "outboxtest: want %d events in this order:\n", len(wants))
	for i, w := range wants {
		fmt.Fprintf(&b, "    %d. %s\n", i+1, w)
	}
	if len(considered) == 0 {
		fmt.Fprintf(&b, "none matches any of them; %s", listed(events, Want{}))
	} else {
		fmt.Fprintf(&b, "the %d events matching any of them, in the order written:\n%s", len(considered), lines(considered, why))
		if len(considered) < len(wants) {
			fmt.Fprintf(&b, "\n    (%d missing)", len(wants)-len(considered))
		}
	}
	tb.Fatalf("%s", b.String())
	return nil
}

// Payload decodes the JSON payload of e into a T, or fails tb with the
// payload it could not decode.
//
//	placed := outboxtest.Payload[OrderPlaced](t, outboxtest.RequireEvent(ctx, t, db, outboxtest.Want{Type: "order.placed"}))
func Payload[T any](tb TB, e Event) T {
	tb.Helper()
	var v T
	if err := json.Unmarshal(e.Payload, &v); err != nil {
		tb.Fatalf("outboxtest: decode the payload of %s into %T: %v", e, v, err)
		var zero T
		return zero
	}
	return v
}

// read is ReadEvents failing tb on an error.
func read(ctx context.Context, tb TB, q Querier) ([]Event, bool) {
	tb.Helper()
	events, err := ReadEvents(ctx, q)
	if err != nil {
		tb.Fatalf("%v", err)
		return nil, false
	}
	return events, true
}

// listed describes the outbox's events for a failure: each with why it
// does not match want.
func listed(events []Event, want Want) string {
	if len(events) == 0 {
		return "the outbox is empty"
	}
	why := make([]string, len(events))
	for i, e := range events {
		why[i] = want.mismatch(e)
	}
	return fmt.Sprintf("the outbox holds %d events:\n%s", len(events), lines(events, why))
}

// lines lists events, each followed by its why if not empty, up to
// shownEvents of them.
func lines(events []Event, why []string) string {
	return human.List(len(events), shownEvents, func(i int) string {
		if why != nil && why[i] != "" {
			return events[i].String() + "  ← " + why[i]
		}
		return events[i].String()
	})
}
