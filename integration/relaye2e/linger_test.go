package relaye2e

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// A publisher lingers after a record reaches a broker's empty buffer, so
// records arriving a few milliseconds apart share one produce request;
// with Linger negative each goes out as soon as the broker answered the
// request before, here one request per record. kfake answers in well
// under the 10 ms between records.
func TestKafkaPublisherLingersToFillItsRequests(t *testing.T) {
	t.Parallel()
	const records, gap = 10, 10 * time.Millisecond
	for _, c := range []struct {
		linger   time.Duration
		min, max int64
	}{{time.Second, 1, 1}, {-1, records / 2, records}} {
		const topic = "linger"
		cluster := kafkatest.New(t, kfake.SeedTopics(1, topic))
		var produces atomic.Int64
		cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
			cluster.KeepControl()
			produces.Add(1)
			return nil, nil, false
		})
		pub, err := kafkapub.NewPublisher(cluster.ListenAddrs(), kafkapub.Config{Linger: c.linger})
		if err != nil {
			t.Fatal(err)
		}
		publish := func(i int) error {
			msg := message.NewMessage(fmt.Sprint(i), []byte("x"))
			msg.Metadata.Set(txoutbox.HeaderAggregateID, fmt.Sprint(i))
			return pub.Publish(topic, msg)
		}
		if err := publish(-1); err != nil { // metadata and connections, as a running relay has them
			t.Fatal(err)
		}
		produces.Store(0)
		var wg sync.WaitGroup
		errs := make([]error, records)
		for i := range records {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = publish(i) }()
			time.Sleep(gap) // about time: records that many milliseconds apart
		}
		wg.Wait()
		_ = pub.Close()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("Linger %v: publish %d: %v", c.linger, i, err)
			}
		}
		if n := produces.Load(); n < c.min || n > c.max {
			t.Errorf("Linger %v: %d records %v apart went out in %d produce requests; want %d to %d", c.linger, records, gap, n, c.min, c.max)
		}
	}
}
