package main

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox/relay"
)

const (
	// warmChunk records are published per warm-up step, and the brokers'
	// CPU per record read around each.
	warmChunk = 50_000
	// warmMinChunks steps run at least: the JIT compiles the produce and
	// replication paths over the first few hundred thousand records.
	warmMinChunks = 4
	// warmSettled is how close two steps' CPU per record must be for the
	// brokers to count as warm.
	warmSettled = 0.15
	// warmBatch messages go to PublishBatch at once, from warmLanes
	// goroutines, as the relays' lanes send them.
	warmBatch, warmLanes = 100, 64
)

// warmBrokers publishes records to the real cluster until its brokers'
// CPU per record settles, at most maxChunks steps, before any scenario is
// measured. A JVM compiles its hot code with C2 only after thousands of
// calls, in compiler threads whose CPU counts as the brokers': on a
// cluster just started, the first scenario's drains cost the brokers two
// to three times what the same drains cost a few minutes later, and the
// scenario that ran first (the relays' or Debezium's) paid for the
// compilation. A production cluster has long been warm.
func warmBrokers(ctx context.Context, e *env, maxChunks int) error {
	if maxChunks <= 0 {
		return nil
	}
	measured := len(e.brokerPids) > 0
	if !measured { // brokers elsewhere: warm them all the same, for a fixed while
		maxChunks = min(maxChunks, warmMinChunks)
	}
	topic, err := e.topic(ctx, "bench.warm")
	if err != nil {
		return err
	}
	pub, err := e.kafkaPublisher()
	if err != nil {
		return err
	}
	defer pub.Close()
	msgs := make([]*message.Message, warmChunk)
	topics := make([]string, warmBatch)
	for i := range topics {
		topics[i] = topic
	}
	prev := math.NaN()
	for step := range maxChunks {
		for i := range msgs {
			msgs[i] = relay.Message(benchEvent(topic, step*warmChunk+i, e.opts.aggregates))
		}
		cpu0, err := processesCPU(e.brokerPids)
		if err != nil {
			return err
		}
		start := time.Now()
		if err := publishBatches(ctx, pub, topics, msgs, warmLanes); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		took := time.Since(start)
		if !measured {
			logf("brokers' warm-up %d: %d records at %.0f/s", step+1, warmChunk, warmChunk/took.Seconds())
			continue
		}
		cpu1, err := processesCPU(e.brokerPids)
		if err != nil {
			return err
		}
		us := float64((cpu1 - cpu0).Microseconds()) / warmChunk
		logf("brokers' warm-up %d: %d records at %.0f/s, %.1f µs of broker CPU per record", step+1, warmChunk, warmChunk/took.Seconds(), us)
		if step+1 >= warmMinChunks && math.Abs(us-prev) <= warmSettled*prev {
			return nil
		}
		prev = us
	}
	if measured {
		logf("brokers' warm-up: the brokers' CPU per record had not settled after %d steps; measuring anyway", maxChunks)
	}
	return nil
}

// publishBatches publishes msgs in batches of len(topics) (each batch's
// topics) from goroutines publishers.
func publishBatches(ctx context.Context, pub message.Publisher, topics []string, msgs []*message.Message, publishers int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	size := len(topics)
	for range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(int64(size))) - size
				if i >= len(msgs) {
					return
				}
				batch := msgs[i:min(i+size, len(msgs))]
				for _, err := range publishBatch(pub, topics[:len(batch)], batch) {
					if err != nil {
						once.Do(func() { first = err; cancel() })
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
