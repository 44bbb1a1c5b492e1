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
	// warmChunk records are published per warm-up step through the relays'
	// publisher, and warmLoop more one per Publish through the loops'.
	warmChunk, warmLoop = 50_000, 2_000
	// warmMinChunks steps run at least.
	warmMinChunks = 4
	// warmSettled is how close two steps' CPU per record must be for the
	// brokers to count as warm.
	warmSettled = 0.15
	// warmWindow is how many steps in a row the JIT compiler threads must
	// have used at most warmJITQuiet of the brokers' CPU, taken together.
	warmWindow, warmJITQuiet = 3, 0.03
	// warmBatch messages go to PublishBatch at once, from warmLanes
	// goroutines, as the relays' lanes send theirs (relay.LaneBatchDefault,
	// 64, at most; the warm-up's figures were measured with 100).
	warmBatch, warmLanes = 100, 64
)

// warmBrokers does what the scenarios will do to the real cluster until
// its brokers are warm, at most maxChunks steps, before any scenario is
// measured: until their JIT compiler threads have been near idle for
// warmWindow steps and their CPU per record has settled.
//
// A JVM compiles its hot code with C2 only after thousands of calls, in
// compiler threads whose CPU counts as the brokers' and that compete with
// them for the cores. On this 2-core machine a cluster just started keeps
// compiling through millions of records (30-60% of the brokers' CPU in the
// first steps), and its CPU per record published and read back falls
// several times over meanwhile, in steps that can look settled while the
// compiler still works. And C2 compiles for what it has seen: a branch
// the warm-up never took (a consumer's fetch where only followers had
// fetched, FetchRequest.isFromFollower) throws the compiled method away
// when a scenario takes it, and it is compiled again. So each step does
// what the scenarios do to the brokers: it recreates its topic, as each
// scenario's round does, publishes through the relays' publisher and the
// loops' one-message publisher, and reads the records back with franz-go,
// as each drain's check does. A production cluster has long been warm.
func warmBrokers(ctx context.Context, e *env, maxChunks int) error {
	if maxChunks <= 0 {
		return nil
	}
	measured := len(e.brokerPids) > 0
	if !measured { // brokers elsewhere: warm them all the same, for a fixed while
		maxChunks = min(maxChunks, warmMinChunks)
	}
	pub, err := e.kafkaPublisher()
	if err != nil {
		return err
	}
	defer pub.Close()
	loop, err := e.loopPublisher()
	if err != nil {
		return err
	}
	defer loop.Close()
	msgs := make([]*message.Message, warmChunk+warmLoop)
	topics := make([]string, warmBatch)
	jit := newJITMeter(e.brokerPids)
	var (
		prev      = math.NaN()
		window    [warmWindow]struct{ cpu, jit time.Duration }
		warmStart = time.Now()
	)
	for step := range maxChunks {
		topic, err := e.topic(ctx, "bench.warm")
		if err != nil {
			return err
		}
		for i := range topics {
			topics[i] = topic
		}
		for i := range msgs {
			msgs[i] = relay.Message(benchEvent(topic, step*len(msgs)+i, e.opts.aggregates))
		}
		cpu0, err := processesCPU(e.brokerPids)
		if err != nil {
			return err
		}
		if _, err := jit.since(); err != nil {
			return err
		}
		start := time.Now()
		if err := publishBatches(ctx, pub, topics, msgs[:warmChunk], warmLanes); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		took := time.Since(start)
		if err := publishBatches(ctx, publishOnly{loop}, topics[:1], msgs[warmChunk:], warmLanes); err != nil {
			return fmt.Errorf("warm-up, one message per Publish: %w", err)
		}
		d, err := readBack(ctx, e.brokers, topic, len(msgs), 10*time.Second)
		if err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if d.Missing > 0 {
			return fmt.Errorf("warm-up: %d of %d records published to %s were not read back", d.Missing, len(msgs), topic)
		}
		if !measured {
			logf("brokers' warm-up %d: %d records at %.0f/s in batches, %d one per Publish, all read back", step+1, warmChunk, warmChunk/took.Seconds(), warmLoop)
			continue
		}
		cpu1, err := processesCPU(e.brokerPids)
		if err != nil {
			return err
		}
		compiled, err := jit.since()
		if err != nil {
			return err
		}
		cpu := cpu1 - cpu0
		window[step%warmWindow].cpu, window[step%warmWindow].jit = cpu, compiled
		var wCPU, wJIT time.Duration
		for _, w := range window {
			wCPU, wJIT = wCPU+w.cpu, wJIT+w.jit
		}
		us := float64(cpu.Microseconds()) / float64(len(msgs))
		logf("brokers' warm-up %d: %d records at %.0f/s in batches, %d one per Publish, %.1f µs of broker CPU per record published and read back, %.0f%% of it compiling", step+1, warmChunk, warmChunk/took.Seconds(), warmLoop, us, 100*compiled.Seconds()/cpu.Seconds())
		if step+1 >= max(warmMinChunks, warmWindow) && wJIT.Seconds() <= warmJITQuiet*wCPU.Seconds() && math.Abs(us-prev) <= warmSettled*prev {
			logf("brokers' warm-up: warm after %d steps in %s", step+1, time.Since(warmStart).Round(time.Second))
			return nil
		}
		prev = us
	}
	if measured {
		logf("brokers' warm-up: the brokers' JIT was still compiling or their CPU per record had not settled after %d steps; measuring anyway", maxChunks)
	}
	return nil
}

// publishOnly hides a publisher's PublishBatch, so publishBatches hands it
// one message per Publish, as the loops publish.
type publishOnly struct{ message.Publisher }

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
