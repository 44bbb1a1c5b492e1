package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// relayRun is a set of in-process relays (goroutines of the harness, each
// with its own relay.New and publisher, as separate replicas have).
type relayRun struct {
	replicas   int
	cfg        relay.Config
	publisher  func() (message.Publisher, error)
	cpuprofile string // written while the relays run, when set
	// stats, when set, records the relays' claim and mark statements.
	stats *sqlStats
	// published counts the messages the relays' publishers acknowledged
	// (set by start).
	published *atomic.Int64
}

// start builds the relays and runs them on s until the returned stop is
// called; stop waits for them to shut down cleanly.
func (rr *relayRun) start(ctx context.Context, s *schemaDB) (stop func(), err error) {
	rr.published = new(atomic.Int64)
	var (
		relays []*relay.Relay
		pubs   []message.Publisher
		db     = s.SQL
	)
	if rr.stats != nil {
		if db, err = observedDB(s.URL, rr.stats.observe); err != nil {
			return nil, err
		}
	}
	closePubs := func() {
		for _, p := range pubs {
			p.Close()
		}
		if db != s.SQL {
			db.Close()
		}
	}
	for i := range rr.replicas {
		pub, err := rr.publisher()
		if err != nil {
			closePubs()
			return nil, err
		}
		pubs = append(pubs, pub)
		pub = ackCounter{Publisher: pub, n: rr.published}
		cfg := rr.cfg
		cfg.Table = s.Table
		cfg.ID = fmt.Sprintf("bench-%d", i)
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		r, err := relay.New(db, pub, cfg)
		if err != nil {
			closePubs()
			return nil, fmt.Errorf("relay: %w", err)
		}
		relays = append(relays, r)
	}
	stopProfile := func() {}
	if rr.cpuprofile != "" {
		f, err := os.Create(rr.cpuprofile)
		if err != nil {
			closePubs()
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			closePubs()
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		stopProfile = func() { pprof.StopCPUProfile(); f.Close() }
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, r := range relays {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(runCtx); err != nil {
				logf("relay %s: %v", r.ID(), err)
			}
		}()
	}
	return func() {
		stopProfile()
		cancel()
		wg.Wait()
		closePubs()
	}, nil
}

// drain runs the relays until no row of s is pending or claimed and
// returns the time from their start to then. It waits in memory until the
// publishers acknowledged the backlog's count of messages, and only then
// polls the table for the last marks: polling PostgreSQL every few
// milliseconds all along would be counted as the relay's database work.
// The harness's queries run on p, which the drain's meter leaves out.
func (rr *relayRun) drain(ctx context.Context, s *schemaDB, p *poller, timeout time.Duration) (time.Duration, error) {
	backlog, err := p.backlog(ctx)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	stop, err := rr.start(ctx, s)
	if err != nil {
		return 0, err
	}
	deadline := start.Add(timeout)
	for rr.published.Load() < backlog && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	end, err := p.waitDrained(ctx, time.Until(deadline))
	if err != nil {
		// How far it got, before the relays stop: a timeout's error says
		// only that rows were left.
		inc := &incompleteError{Published: rr.published.Load(), Backlog: backlog, Elapsed: time.Since(start)}
		if ctx.Err() != nil || !errors.Is(err, errNotDrained) {
			inc.Err = err
		}
		stop()
		return 0, inc
	}
	stop()
	return end.Sub(start), nil
}

// meteredDrain drains s with rr (see drain) and returns how long it took
// and what it cost, the harness's own queries left out.
func (e *env) meteredDrain(ctx context.Context, rr *relayRun, s *schemaDB) (time.Duration, *cost, error) {
	p, err := newPoller(ctx, s)
	if err != nil {
		return 0, nil, err
	}
	defer p.close()
	if _, err := p.backlog(ctx); err != nil {
		return 0, nil, err
	}
	m := e.startMeter(ctx, s.SQL).exclude(p.pid)
	took, err := rr.drain(ctx, s, p, e.opts.timeout)
	if err != nil {
		return 0, nil, err
	}
	return took, m.stop(ctx, e.opts.events), nil
}

// ackCounter counts, in a counter it may share, the messages its Publisher
// acknowledged.
type ackCounter struct {
	message.Publisher
	n *atomic.Int64
}

func (p ackCounter) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	p.n.Add(int64(len(msgs)))
	return nil
}

// runUntil runs the relays until ctx ends.
func (rr *relayRun) runUntil(ctx context.Context, s *schemaDB) error {
	stop, err := rr.start(context.WithoutCancel(ctx), s)
	if err != nil {
		return err
	}
	<-ctx.Done()
	stop()
	return nil
}

// kafkaPublisher returns the relays' Kafka publisher (kafkapub) for the
// broker, with relayLinger: every relay scenario uses it, so they differ
// only in what drives it.
func (e *env) kafkaPublisher() (message.Publisher, error) {
	return e.newKafkaPublisher(e.relayLinger())
}

// relayLinger is -linger, by default kafkapub's own (0), on kfake as on
// the real cluster: the relays run with every default a user gets. On
// kfake, which answers a request in microseconds whatever it holds, the
// linger only adds its wait to each publish; -linger -1 shows the relays
// without it.
func (e *env) relayLinger() time.Duration { return e.opts.linger }

// loopPublisher is kafkaPublisher for the loops that publish one message
// per Publish and wait for it (plain, naive, forwarder, kafkalimit, River's
// workers), without a linger: each of their requests holds a message or
// two whatever the linger, so lingering would only add its wait to every
// publish (on kfake it capped the plain loop's 64 lanes at 12,800 events/s).
// Each peer runs with the settings that give it its best drain.
func (e *env) loopPublisher() (message.Publisher, error) {
	return e.newKafkaPublisher(-1)
}

func (e *env) newKafkaPublisher(linger time.Duration) (message.Publisher, error) {
	cfg := kafkapub.Config{ClientID: "bench", Compression: e.opts.compression, Linger: linger}
	if e.opts.maxOpenRequests > 1 || !e.opts.idempotent {
		cfg.Configure = func(sc *sarama.Config) {
			sc.Producer.Idempotent = e.opts.idempotent
			sc.Net.MaxOpenRequests = e.opts.maxOpenRequests
		}
	}
	pub, err := kafkapub.NewPublisher(e.brokers, cfg)
	if err != nil {
		return nil, fmt.Errorf("kafka publisher: %w", err)
	}
	return pub, nil
}

// producerSettings adds the Kafka publishers' producer settings to a
// scenario's settings.
func (e *env) producerSettings(settings map[string]any) map[string]any {
	settings["idempotent"] = e.opts.idempotent
	settings["max_open_requests"] = e.opts.maxOpenRequests
	settings["compression"] = e.opts.compression.String()
	linger := "none"
	if l := e.relayLinger(); l >= 0 {
		linger = cmp.Or(l, kafkapub.LingerDefault).String()
	}
	settings["linger"] = linger + " (the relays'; none for the one-message loops)"
	return settings
}

// PublishBatch keeps the relay's batching path (see ackRecorder).
func (p ackCounter) PublishBatch(topics []string, msgs []*message.Message) []error {
	errs := publishBatch(p.Publisher, topics, msgs)
	n := int64(len(msgs))
	for _, err := range errs {
		if err != nil {
			n--
		}
	}
	p.n.Add(n)
	return errs
}
