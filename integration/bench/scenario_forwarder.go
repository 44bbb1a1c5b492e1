package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox/relay"
)

// forwarderTopic is the watermill-sql topic (table watermill_<topic>) the
// application writes its enveloped messages to.
const forwarderTopic = "bench_outbox"

// runForwarder drains a backlog with Watermill's own outbox: messages
// written by the watermill-sql publisher (its PostgreSQL or MySQL schema
// adapter, by the database) inside transactions, and
// components/forwarder reading them with the watermill-sql subscriber and
// publishing to Kafka through watermill-kafka (the relay's publisher
// configuration). batch is the subscriber's SubscribeBatchSize.
func runForwarder(ctx context.Context, e *env, batch int) (throughput, error) {
	name := fmt.Sprintf("forwarder%d", batch)
	s, err := e.newSchema(ctx, name)
	if err != nil {
		return throughput{}, err
	}
	defer s.close()
	n := e.opts.forwarderEvents
	topic, err := e.topic(ctx, "bench."+name)
	if err != nil {
		return throughput{}, err
	}
	logger := watermill.NopLogger{}

	var (
		schema      wsql.SchemaAdapter  = wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: batch}
		offsets     wsql.OffsetsAdapter = wsql.DefaultPostgreSQLOffsetsAdapter{}
		offsetsName                     = "DefaultPostgreSQLOffsetsAdapter"
	)
	if s.mysql {
		schema, offsets, offsetsName = wsql.DefaultMySQLSchema{SubscribeBatchSize: batch}, wsql.DefaultMySQLOffsetsAdapter{}, "DefaultMySQLOffsetsAdapter"
	}
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(s.SQL), wsql.SubscriberConfig{
		SchemaAdapter:    schema,
		OffsetsAdapter:   offsets,
		InitializeSchema: true,
	}, logger)
	if err != nil {
		return throughput{}, fmt.Errorf("%s: subscriber: %w", name, err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(forwarderTopic); err != nil {
		return throughput{}, fmt.Errorf("%s: initialize schema: %w", name, err)
	}
	if err := writeForwarderBacklog(ctx, s, schema, topic, n, e.opts.aggregates); err != nil {
		return throughput{}, fmt.Errorf("%s: %w", name, err)
	}

	kafka, err := e.loopPublisher()
	if err != nil {
		return throughput{}, err
	}
	counted := &countingPublisher{Publisher: kafka, want: int64(n), done: make(chan struct{})}
	defer counted.Close()
	fwd, err := forwarder.NewForwarder(sub, counted, logger, forwarder.Config{ForwarderTopic: forwarderTopic})
	if err != nil {
		return throughput{}, fmt.Errorf("%s: %w", name, err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	m := e.startMeter(ctx, s.SQL)
	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := fwd.Run(runCtx); err != nil {
			logf("%s: forwarder: %v", name, err)
		}
	}()
	select {
	case <-counted.done:
	case <-ctx.Done():
	case <-time.After(e.opts.timeout):
	}
	waited := time.Since(start)
	end := counted.last()
	c := m.stop(ctx, n)
	stop()
	_ = fwd.Close()
	wg.Wait()
	if got := counted.n.Load(); got < int64(n) {
		return throughput{}, fmt.Errorf("%s: %w", name, &incompleteError{Published: got, Backlog: int64(n), Elapsed: waited, Err: ctx.Err()})
	}
	res := newThroughput("forwarder", n, end.Sub(start), map[string]any{
		"subscribe_batch_size": batch, "poll_interval": "1s (default)", "ack_deadline": "30s (default)",
		"offsets": offsetsName, "publisher": "kafkapub.Publisher.Publish (one message per call, as watermill-kafka's Publish)",
	})
	res.Cost = c
	return e.withDelivery(ctx, res, topic)
}

// writeForwarderBacklog writes the events through the watermill-sql
// publisher wrapped in the forwarder's envelope, inside transactions of 1000
// messages, as an application would (one message per business transaction
// would only make the setup slower).
func writeForwarderBacklog(ctx context.Context, s *schemaDB, schema wsql.SchemaAdapter, topic string, n, aggregates int) error {
	const perTx = 1000
	for done := 0; done < n; done += perTx {
		tx, err := s.SQL.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		pub, err := wsql.NewPublisher(wsql.TxFromStdSQL(tx), wsql.PublisherConfig{SchemaAdapter: schema}, watermill.NopLogger{})
		if err != nil {
			tx.Rollback()
			return fmt.Errorf("sql publisher: %w", err)
		}
		fp := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: forwarderTopic})
		msgs := make([]*message.Message, 0, perTx)
		for i := done; i < min(done+perTx, n); i++ {
			msgs = append(msgs, relay.Message(benchEvent(topic, i, aggregates)))
		}
		if err := fp.Publish(topic, msgs...); err != nil {
			tx.Rollback()
			return fmt.Errorf("write forwarder backlog: %w", err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("write forwarder backlog: %w", err)
		}
	}
	return nil
}

// countingPublisher counts acknowledged messages and closes done when want
// of them were published.
type countingPublisher struct {
	message.Publisher
	want   int64
	n      atomic.Int64
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	lastAt time.Time
}

func (c *countingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := c.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	now := time.Now()
	c.mu.Lock()
	c.lastAt = now
	c.mu.Unlock()
	if c.n.Add(int64(len(msgs))) >= c.want {
		c.once.Do(func() { close(c.done) })
	}
	return nil
}

func (c *countingPublisher) last() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastAt
}
