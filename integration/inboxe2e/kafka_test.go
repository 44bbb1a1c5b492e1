package inboxe2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox/inbox"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
)

// TestThroughKafka publishes events with duplicates, in shuffled order, the
// way the relay does (Sarama through watermill-kafka, event_id metadata,
// aggregate id as the key) to a real Kafka-protocol broker, and consumes
// them with two Watermill consumer groups whose handlers use the inbox
// middleware. Every effect must happen exactly once per consumer, including
// for events whose first handling fails and is redelivered by the
// subscriber.
func TestThroughKafka(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cluster := kafkatest.New(t)
	brokers := cluster.ListenAddrs()
	logger := watermill.NopLogger{}
	const topic = "accounts"

	rng := seededRand(t)
	type event struct {
		id      uuid.UUID
		account string
	}
	const events, accounts = 60, 8
	var all []event
	var deliveries []event
	for i := range events {
		e := event{uuid.Must(uuid.NewV7()), fmt.Sprintf("acct-%d", i%accounts)}
		all = append(all, e)
		for range 1 + rng.IntN(3) {
			deliveries = append(deliveries, e)
		}
	}
	rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	// The first handling of these fails once per consumer; the subscriber
	// nacks and redelivers.
	failOnce := map[uuid.UUID]bool{all[0].id: true, all[events/2].id: true}

	pubCfg := kafka.DefaultSaramaSyncPublisherConfig()
	pubCfg.Version = sarama.V2_8_0_0
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{
		Brokers:               brokers,
		Marshaler:             kafka.NewWithPartitioningMarshaler(func(_ string, m *message.Message) (string, error) { return m.Metadata.Get("aggregate_id"), nil }),
		OverwriteSaramaConfig: pubCfg,
	}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for _, d := range deliveries {
		// Each publish gets a fresh Watermill UUID, as a republish by
		// another relay process might; only event_id identifies the event.
		msg := message.NewMessage(watermill.NewUUID(), []byte(d.account))
		msg.Metadata.Set("event_id", d.id.String())
		msg.Metadata.Set("aggregate_id", d.account)
		if err := pub.Publish(topic, msg); err != nil {
			t.Fatal(err)
		}
	}

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		seen    = map[string]int{} // handler invocations per consumer, failures included
		failed  = map[string]map[uuid.UUID]bool{}
		allDone = make(chan struct{})
	)
	want := len(deliveries) + len(failOnce)
	consumers := []string{"billing", "shipping"}
	for _, consumer := range consumers {
		failed[consumer] = map[uuid.UUID]bool{}
		subCfg := kafka.DefaultSaramaSubscriberConfig()
		subCfg.Version = sarama.V2_8_0_0
		subCfg.Consumer.Offsets.Initial = sarama.OffsetOldest
		sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
			Brokers:     brokers,
			Unmarshaler: kafka.DefaultMarshaler{},
			// No consumer group: Sarama 1.43's group session fails against
			// kfake ("error decoding packet: invalid byteslice length") and
			// restarts forever. Each subscriber reads every partition from
			// the oldest offset instead, which delivers the same messages
			// and redelivers a nacked one the same way.
			OverwriteSaramaConfig: subCfg,
			NackResendSleep:       10 * time.Millisecond,
		}, logger)
		if err != nil {
			t.Fatal(err)
		}
		mw, err := b.ib.Middleware(inbox.MiddlewareConfig{Consumer: consumer, DB: b.db.SQL})
		if err != nil {
			t.Fatal(err)
		}
		h := router.AddConsumerHandler(consumer, topic, sub, func(msg *message.Message) error {
			tx, ok := inbox.TxFromContext(msg.Context())
			if !ok {
				return errors.New("no transaction in the message context")
			}
			id := uuid.MustParse(msg.Metadata.Get("event_id"))
			if err := effect(msg.Context(), tx, consumer, id, string(msg.Payload), 1); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if failOnce[id] && !failed[consumer][id] {
				failed[consumer][id] = true
				return errors.New("transient failure") // after the effect: the rollback must undo it
			}
			return nil
		})
		// Outermost: counts every delivery, duplicates and failures included.
		h.AddMiddleware(func(next message.HandlerFunc) message.HandlerFunc {
			return func(msg *message.Message) ([]*message.Message, error) {
				out, err := next(msg)
				mu.Lock()
				defer mu.Unlock()
				seen[consumer]++
				if seen["billing"] == want && seen["shipping"] == want {
					close(allDone)
				}
				return out, err
			}
		}, mw)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(ctx) }()
	select {
	case <-allDone:
	case <-time.After(90 * time.Second):
		mu.Lock()
		t.Errorf("deliveries handled: %v, want %d per consumer", seen, want)
		mu.Unlock()
	}
	if err := router.Close(); err != nil {
		t.Error(err)
	}
	if err := <-runErr; err != nil {
		t.Error(err)
	}

	wantBalances := map[string]int64{}
	for _, e := range all {
		wantBalances[e.account] += int64(len(consumers)) // both consumers credit the same account table
	}
	for _, consumer := range consumers {
		effects := effectsOf(t, b.db.SQL, consumer)
		if len(effects) != events {
			t.Errorf("%s: %d events have effects, want %d", consumer, len(effects), events)
		}
		for id, n := range effects {
			if n != 1 {
				t.Errorf("%s: event %s applied %d times", consumer, id, n)
			}
		}
	}
	if got := balances(t, b.db.SQL); fmt.Sprint(got) != fmt.Sprint(wantBalances) {
		t.Errorf("balances = %v\nwant %v", got, wantBalances)
	}
}
