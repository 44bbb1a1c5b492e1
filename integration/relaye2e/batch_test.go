package relaye2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// kafkapub's PublishBatch reports each message's outcome: a message the
// producer refuses fails alone, the others of the call reach the broker,
// with the headers Publish gives them.
func TestKafkaPublishBatchReportsEachMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := b.kafkaPublisher(t, kafkapub.Config{MaxMessageBytes: 2048})
	bp, ok := pub.(relay.BatchPublisher)
	if !ok {
		t.Fatalf("%T is not a relay.BatchPublisher", pub)
	}
	var (
		topics []string
		msgs   []*message.Message
		ids    []string
	)
	for i := range 5 {
		payload := fmt.Sprintf(`{"i":%d}`, i)
		if i == 2 {
			payload = `"` + strings.Repeat("x", 10_000) + `"`
		}
		e, err := txoutbox.NewEvent("batch", "order", fmt.Sprintf("agg-%d", i), "order.changed", payload)
		if err != nil {
			t.Fatal(err)
		}
		topics = append(topics, "batch")
		msgs = append(msgs, relay.Message(e))
		ids = append(ids, e.ID.String())
	}
	errs := bp.PublishBatch(topics, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("PublishBatch returned %d outcomes for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		if (err != nil) != (i == 2) {
			t.Errorf("message %d: err = %v; want an error for the oversized message 2 only", i, err)
		}
	}
	got := consume(t, b.brokers, "batch", 4, 30*time.Second)
	seen := map[string]bool{}
	for _, d := range got {
		seen[d.eventID] = true
		if !strings.HasPrefix(d.key, "agg-") {
			t.Errorf("record key %q, want the aggregate id", d.key)
		}
	}
	for i, id := range ids {
		if seen[id] != (i != 2) {
			t.Errorf("message %d on the broker: %v", i, seen[id])
		}
	}
	if errs := bp.PublishBatch([]string{"batch"}, msgs[:1]); errs != nil {
		t.Fatalf("a batch of one: %v", errs)
	}
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if errs := bp.PublishBatch(topics[:1], msgs[:1]); len(errs) != 1 || errs[0] != kafkapub.ErrClosed {
		t.Fatalf("after Close: %v, want ErrClosed", errs)
	}
}
