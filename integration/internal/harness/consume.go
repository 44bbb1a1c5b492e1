package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Delivery is one record the broker holds, in partition order.
type Delivery struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	EventID   string // the event_id header; "" if missing
}

// ReadAll reads every record of topics from the broker with franz-go's kgo,
// from the start of each partition up to its end offset at the time of the
// call, and calls fn for each in partition order (partitions interleave).
func ReadAll(ctx context.Context, broker string, topics []string, fn func(Delivery) error) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(broker),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	if err != nil {
		return fmt.Errorf("verifier client: %w", err)
	}
	defer cl.Close()
	ends, err := endOffsets(ctx, cl, topics)
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
	for remaining > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read back: %d partitions not read to their end: %w", remaining, err)
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			ferr = fmt.Errorf("fetch %s/%d: %w", t, p, err)
		})
		if ferr != nil {
			return ferr
		}
		var cbErr error
		fetches.EachRecord(func(r *kgo.Record) {
			end := ends[r.Topic][r.Partition]
			if r.Offset >= end || cbErr != nil {
				return // written after the call started
			}
			d := Delivery{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key)}
			for _, h := range r.Headers {
				if h.Key == "event_id" {
					d.EventID = string(h.Value)
				}
			}
			if err := fn(d); err != nil {
				cbErr = err
			}
			if r.Offset == end-1 {
				remaining--
			}
		})
		if cbErr != nil {
			return cbErr
		}
	}
	return nil
}

// endOffsets returns the end (high-water) offset of every partition of
// topics.
func endOffsets(ctx context.Context, cl *kgo.Client, topics []string) (map[string]map[int32]int64, error) {
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
