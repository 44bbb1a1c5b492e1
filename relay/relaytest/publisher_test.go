package relaytest_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/relaytest"
)

func msg(t *testing.T, aggregateID, typ string) *message.Message {
	t.Helper()
	ev, err := txoutbox.NewEvent("orders", "order", aggregateID, typ, map[string]any{"id": aggregateID})
	if err != nil {
		t.Fatal(err)
	}
	return relay.Message(ev)
}

func TestPublisherKeepsMessagesWithTheirKeysInOrder(t *testing.T) {
	t.Parallel()
	p := relaytest.NewPublisher()
	a, b := msg(t, "1", "order.placed"), msg(t, "2", "order.paid")
	if err := p.Publish("orders", a); err != nil {
		t.Fatal(err)
	}
	if errs := p.PublishBatch([]string{"payments", "orders"}, []*message.Message{b, msg(t, "3", "order.placed")}); errs != nil {
		t.Fatal(errs)
	}
	got := p.Messages()
	if len(got) != 3 || got[0].UUID != a.UUID || got[0].Key != "1" || got[0].Topic != "orders" ||
		got[1].Key != "2" || got[1].Topic != "payments" || got[1].EventType() != "order.paid" || string(got[0].Payload) != `{"id":"1"}` {
		t.Fatalf("got %+v", got)
	}
	if o := p.Topic("orders"); len(o) != 2 || o[1].Key != "3" {
		t.Fatalf("Topic(orders) = %+v", o)
	}
	// What a caller gets is its own.
	got[0].Metadata.Set(txoutbox.HeaderEventType, "changed")
	got[0].Payload[0] = 'X'
	if again := p.Messages()[0]; again.EventType() != "order.placed" || string(again.Payload) != `{"id":"1"}` {
		t.Fatalf("a caller's change reached the publisher: %+v", again)
	}
	p.Reset()
	if len(p.Messages()) != 0 {
		t.Fatal("Reset kept messages")
	}
}

func TestPublisherFailsWhatItIsTold(t *testing.T) {
	t.Parallel()
	boom := errors.New("broker says no")
	p := relaytest.NewPublisher()
	target := msg(t, "1", "order.placed")
	p.Fail(relaytest.Failure{EventID: target.UUID, Times: 2, Err: boom, Permanent: true})
	p.Fail(relaytest.Failure{Topic: "audit"})

	for i := range 2 {
		err := p.Publish("orders", target)
		if !errors.Is(err, boom) || !relay.IsPermanent(err) {
			t.Fatalf("publish %d: %v, want a permanent %v", i, err, boom)
		}
	}
	if err := p.Publish("orders", target); err != nil {
		t.Fatalf("third publish: %v, want it acknowledged (Times: 2)", err)
	}
	err := p.Publish("audit", msg(t, "2", "x"))
	if !errors.Is(err, relaytest.ErrRefused) || relay.IsPermanent(err) {
		t.Fatalf("audit: %v, want a transient ErrRefused", err)
	}
	errs := p.PublishBatch([]string{"orders", "audit"}, []*message.Message{msg(t, "3", "y"), msg(t, "4", "z")})
	if len(errs) != 2 || errs[0] != nil || !errors.Is(errs[1], relaytest.ErrRefused) {
		t.Fatalf("PublishBatch: %v", errs)
	}
	if n, r := len(p.Messages()), len(p.Refused()); n != 2 || r != 4 {
		t.Fatalf("%d acknowledged and %d refused, want 2 and 4", n, r)
	}
	// A refused message in Publish refuses the ones after it too.
	err = p.Publish("audit", msg(t, "5", "a"), msg(t, "6", "b"))
	if !errors.Is(err, relaytest.ErrRefused) || len(p.Refused()) != 6 {
		t.Fatalf("%v, %d refused", err, len(p.Refused()))
	}

	p.Heal()
	if err := p.Publish("audit", msg(t, "7", "c")); err != nil {
		t.Fatalf("after Heal: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish("orders", msg(t, "8", "d")); !errors.Is(err, relaytest.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestPublisherIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	p := relaytest.NewPublisher()
	p.Fail(relaytest.Failure{EventType: "refused", Times: 10})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				typ := "ok"
				if i%5 == 0 {
					typ = "refused"
				}
				_ = p.Publish("orders", msg(t, fmt.Sprint(g, "-", i), typ))
				_ = p.Messages()
			}
		}()
	}
	wg.Wait()
	if n, r := len(p.Messages()), len(p.Refused()); n != 390 || r != 10 {
		t.Fatalf("%d acknowledged and %d refused, want 390 and 10", n, r)
	}
}

func TestPublisherCallsOnPublishBeforeItAnswers(t *testing.T) {
	t.Parallel()
	p := relaytest.NewPublisher()
	type seen struct{ topic, id string }
	var mu sync.Mutex
	var got []seen
	p.OnPublish(func(topic string, m *message.Message) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, seen{topic, m.UUID})
	})
	held := msg(t, "1", "order.placed")
	gate, holding := make(chan struct{}), make(chan struct{})
	p.OnPublish(func(_ string, m *message.Message) {
		if m.UUID == held.UUID {
			close(holding)
			<-gate
		}
	})

	// A call with a held message answers nothing of it until released,
	// and holds up no other call.
	first := msg(t, "2", "order.placed")
	done := make(chan error, 1)
	go func() { done <- p.Publish("orders", first, held) }()
	<-holding
	other := msg(t, "3", "order.placed")
	if errs := p.PublishBatch([]string{"payments"}, []*message.Message{other}); errs != nil {
		t.Fatal(errs)
	}
	if got := p.Messages(); len(got) != 1 || got[0].UUID != other.UUID {
		t.Fatalf("kept %+v while a call was held, want only the other call's message", got)
	}
	select {
	case err := <-done:
		t.Fatalf("the held call returned %v before its release", err)
	default:
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := p.Messages(); len(got) != 3 || got[1].UUID != first.UUID || got[2].UUID != held.UUID {
		t.Fatalf("kept %+v after the release", got)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []seen{{"orders", first.UUID}, {"orders", held.UUID}, {"payments", other.UUID}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("OnPublish saw %v, want %v", got, want)
	}
}
