package harness

import (
	"context"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
)

// Delivery is one record the broker holds, in partition order.
type Delivery struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	EventID   string    // the event_id header; "" if missing
	Timestamp time.Time // the record's timestamp: when the producer last added it to a batch (Sarama stamps a retry anew)
	// Producer and Epoch are the record batch's producer id and epoch:
	// two copies from one producer and epoch are its retry, which the
	// broker failed to see as one; from two epochs, the producer rolled
	// its epoch over; from two producers, two publishes.
	Producer int64
	Epoch    int16
}

// ReadAll reads every record of topics from the broker (an address, or a
// comma-separated list of them), from the start of
// each partition up to its end offset at the time of the call, and calls fn
// for each in partition order (partitions interleave): kafkatest.ReadAll,
// with each record cut down to what the verifier checks.
func ReadAll(ctx context.Context, broker string, topics []string, fn func(Delivery) error) error {
	return kafkatest.ReadAll(ctx, strings.Split(broker, ","), topics, func(r *kgo.Record) error {
		return fn(Delivery{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Producer: r.ProducerID, Epoch: r.ProducerEpoch,
			EventID: kafkatest.Header(r, txoutbox.HeaderEventID), Timestamp: r.Timestamp})
	})
}
