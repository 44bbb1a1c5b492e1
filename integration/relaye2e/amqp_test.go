package relaye2e

import (
	"context"
	"github.com/txoutbox/txoutbox"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

// The relay depends only on message.Publisher: any Watermill publisher
// works. This relays to RabbitMQ, the machine's second broker, with
// publisher confirms so Publish returns after the broker has the message.
func TestRelayThroughRabbitMQ(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	b := &bundle{db: db, writer: testkit.NewWriter(t, db.Table())}
	topic := "txoutbox_test_" + db.Schema
	want := b.write(t, topic, 200, 5)

	cfg := amqp.NewDurableQueueConfig("amqp://guest:guest@127.0.0.1:5672/")
	cfg.Publish.ConfirmDelivery = true
	pub, err := amqp.NewPublisher(cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatalf("RabbitMQ on 127.0.0.1:5672 is not usable (start it with: rabbitmq-server -detached): %v", err)
	}
	t.Cleanup(func() { pub.Close() })
	sub, err := amqp.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Delete the test's queue.
		conn, err := amqp.NewConnection(amqp.ConnectionConfig{AmqpURI: cfg.Connection.AmqpURI}, watermill.NopLogger{})
		if err == nil {
			if ch, err := conn.Connection().Channel(); err == nil {
				ch.QueueDelete(topic, false, false, false)
				ch.Close()
			}
			conn.Close()
		}
	})

	runRelay(t, db, pub, b.fastConfig())

	var got []delivered
	seen := map[string]bool{}
	for len(seen) < len(want) {
		select {
		case m := <-msgs:
			if m.UUID != m.Metadata.Get(txoutbox.HeaderEventID) {
				t.Fatalf("message UUID %s is not the event id %s", m.UUID, m.Metadata.Get(txoutbox.HeaderEventID))
			}
			got = append(got, delivered{key: m.Metadata.Get(txoutbox.HeaderAggregateID), eventID: m.UUID})
			seen[m.UUID] = true
			m.Ack()
		case <-ctx.Done():
			t.Fatalf("received %d of %d events from RabbitMQ", len(seen), len(want))
		}
	}
	check(t, want, got)
}
