package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrIdle ends Consume when no record arrived for its idle time.
var ErrIdle = errors.New("kafkatest: no new record within the idle time")

// Header returns the value of the record's header key ("" if missing).
func Header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Consume reads topics from the start of each partition with an
// independent franz-go client and calls each for every record, in
// partition order (partitions interleave), until each returns false (then
// it returns nil), ctx ends (ctx's error) or, when idle is not zero, no
// record arrived for idle (ErrIdle). opts add client options, such as TLS.
func Consume(ctx context.Context, brokers, topics []string, idle time.Duration, each func(*kgo.Record) bool, opts ...kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer cl.Close()
	last := time.Now()
	for {
		pollCtx, cancel := ctx, context.CancelFunc(func() {})
		if idle > 0 {
			pollCtx, cancel = context.WithTimeout(ctx, idle/4)
		}
		fetches := cl.PollFetches(pollCtx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				ferr = fmt.Errorf("fetch %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		more, n := true, 0
		fetches.EachRecord(func(r *kgo.Record) {
			if more {
				n++
				more = each(r)
			}
		})
		if !more {
			return nil
		}
		if n > 0 {
			last = time.Now()
		} else if idle > 0 && time.Since(last) > idle {
			return ErrIdle
		}
	}
}

// ReadAll reads every record of topics, from the start of each partition
// up to its end offset at the time of the call, and calls fn for each in
// partition order (partitions interleave). An error from fn ends the read
// and is returned.
func ReadAll(ctx context.Context, brokers, topics []string, fn func(*kgo.Record) error) error {
	ends, err := EndOffsets(ctx, brokers, topics)
	if err != nil {
		return err
	}
	remaining := 0
	for _, parts := range ends {
		for _, end := range parts {
			if end > 0 {
				remaining++
			}
		}
	}
	if remaining == 0 {
		return nil
	}
	var fnErr error
	err = Consume(ctx, brokers, topics, 0, func(r *kgo.Record) bool {
		end := ends[r.Topic][r.Partition]
		if r.Offset >= end {
			return true // written after the call started
		}
		if fnErr = fn(r); fnErr != nil {
			return false
		}
		if r.Offset == end-1 {
			remaining--
		}
		return remaining > 0
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("read back: %d partitions not read to their end: %w", remaining, err)
	}
	return nil
}

// EndOffsets returns the end (high-water) offset of every partition of
// topics.
func EndOffsets(ctx context.Context, brokers, topics []string) (map[string]map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	defer cl.Close()
	meta := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		meta.Topics = append(meta.Topics, rt)
	}
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.ReplicaID = -1
	for _, t := range mresp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("metadata of topic %s: %w", *t.Topic, err)
		}
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = *t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p.Partition
			rp.CurrentLeaderEpoch = -1
			rp.Timestamp = -1 // latest
			rt.Partitions = append(rt.Partitions, rp)
		}
		lo.Topics = append(lo.Topics, rt)
	}
	lresp, err := lo.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	ends := map[string]map[int32]int64{}
	for _, t := range lresp.Topics {
		ends[t.Topic] = map[int32]int64{}
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("end offset of %s/%d: %w", t.Topic, p.Partition, err)
			}
			ends[t.Topic][p.Partition] = p.Offset
		}
	}
	return ends, nil
}
