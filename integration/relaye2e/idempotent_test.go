package relaye2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// TestKafkaPublisherRetriesStoreOnce publishes from many goroutines while
// the broker answers every fifth produce request REQUEST_TIMED_OUT after
// storing its records, kfake's "stored but not acknowledged" case. Sarama
// retries those batches; the idempotent producer must make the broker drop
// the copies, and the messages buffered during a retry must still be
// stored: every acknowledged message is on the topic exactly once.
func TestKafkaPublisherRetriesStoreOnce(t *testing.T) {
	t.Parallel()
	const topic = "idempotent"
	c := kafkatest.New(t, kfake.SeedTopics(2, topic))
	var requests atomic.Int64
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.RequestTimedOut, Count: -1,
		When: func(kmsg.Request) bool { return requests.Add(1)%5 == 0 }})
	pub, err := kafkapub.NewPublisher(c.ListenAddrs(), kafkapub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const publishers, each = 32, 60
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		acked = map[string]bool{}
	)
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("m-%02d-%03d", p, i)
				msg := message.NewMessage(id, []byte(id))
				msg.Metadata.Set(txoutbox.HeaderAggregateID, fmt.Sprintf("agg-%d", p))
				if err := pub.Publish(topic, msg); err != nil {
					continue // not acknowledged: may or may not be stored
				}
				mu.Lock()
				acked[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if requests.Load() < 25 {
		t.Fatalf("only %d produce requests: the faults were not exercised", requests.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stored := map[string]int{}
	if err := kafkatest.ReadAll(ctx, c.ListenAddrs(), []string{topic}, func(r *kgo.Record) error {
		stored[string(r.Value)]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(acked) < publishers*each/2 {
		t.Fatalf("only %d of %d publishes acknowledged", len(acked), publishers*each)
	}
	for id := range acked {
		if n := stored[id]; n != 1 {
			t.Errorf("acknowledged message %s stored %d times, want once", id, n)
		}
	}
	t.Logf("%d produce requests, %d of %d publishes acknowledged", requests.Load(), len(acked), publishers*each)
}
