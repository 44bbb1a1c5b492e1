package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox/relay"
)

// kafkaLimitPublishers is the concurrency for the broker ceiling,
// the same as Watermill's published Kafka figure.
const kafkaLimitPublishers = 64

// runKafkaLimit publishes the backlog's events with the relay's
// watermill-kafka publisher alone, from 64 goroutines: the broker ceiling.
// Messages are built before the clock starts.
func runKafkaLimit(ctx context.Context, e *env) (throughput, error) {
	n := e.opts.events
	topic, err := e.topic(ctx, "bench.kafkalimit")
	if err != nil {
		return throughput{}, err
	}
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = relay.Message(benchEvent(topic, i, e.opts.aggregates))
	}
	pub, err := e.loopPublisher()
	if err != nil {
		return throughput{}, err
	}
	defer pub.Close()
	// Warm up: metadata and connections, as a running relay
	// has them.
	if err := pub.Publish(topic, relay.Message(benchEvent(topic, 0, 1))); err != nil {
		return throughput{}, fmt.Errorf("kafkalimit: warm-up: %w", err)
	}
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	start := time.Now()
	for range kafkaLimitPublishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				if err := pub.Publish(topic, msgs[i]); err != nil {
					errMu.Lock()
					first = err
					errMu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if first != nil {
		return throughput{}, fmt.Errorf("kafkalimit: publish: %w", first)
	}
	return newThroughput("kafkalimit", n, took, map[string]any{"publishers": kafkaLimitPublishers, "publisher": "kafkapub.Publisher.Publish (one message per call, as watermill-kafka's Publish)"}), nil
}

// runKafkaBatch is runKafkaLimit with the relays' batches: the backlog's
// events from kafkaLimitPublishers goroutines, each handing the relays'
// publisher (kafkaPublisher, with their linger) relay.LaneBatchDefault
// messages at a time through PublishBatch, as a relay's lanes do. It is
// the bare publisher to hold a relay against: the one-message publisher
// waits a round trip per message, which on a replicated cluster makes it
// slower than the relay it should bound. round numbers the drain.
func runKafkaBatch(ctx context.Context, e *env, round int) (throughput, error) {
	n := e.opts.events
	topic, err := e.topic(ctx, "bench.kafkabatch")
	if err != nil {
		return throughput{}, err
	}
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = relay.Message(benchEvent(topic, i, e.opts.aggregates))
	}
	topics := make([]string, relay.LaneBatchDefault)
	for i := range topics {
		topics[i] = topic
	}
	pub, err := e.kafkaPublisher()
	if err != nil {
		return throughput{}, err
	}
	defer pub.Close()
	if err := pub.Publish(topic, relay.Message(benchEvent(topic, 0, 1))); err != nil {
		return throughput{}, fmt.Errorf("kafkabatch: warm-up: %w", err)
	}
	start := time.Now()
	if err := publishBatches(ctx, pub, topics, msgs, kafkaLimitPublishers); err != nil {
		return throughput{}, fmt.Errorf("kafkabatch: publish: %w", err)
	}
	took := time.Since(start)
	r := newThroughput("kafkabatch", n, took, e.producerSettings(map[string]any{"publishers": kafkaLimitPublishers,
		"batch": relay.LaneBatchDefault, "publisher": "kafkapub.Publisher.PublishBatch, as the relays' lanes"}))
	r.Round = round
	return r, nil
}
