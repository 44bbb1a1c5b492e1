package kafkapub

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay"
)

// Defaults and floors of Config: a field left zero takes its default, and
// one below its floor is refused (Validate).
const (
	// TimeoutDefault is Config.Timeout's default.
	TimeoutDefault = 10 * time.Second
	// TimeoutFloor leaves a request a round trip to the broker and the
	// acknowledgement of every in-sync replica; below it every publish
	// fails.
	TimeoutFloor = 100 * time.Millisecond
	// MaxMessageBytesDefault is Config.MaxMessageBytes's default, Kafka's
	// default message.max.bytes.
	MaxMessageBytesDefault = 1048588
	// MaxMessageBytesFloor: the headers every message carries (event id,
	// type, aggregate, time, content type) and a record's framing take a
	// few hundred bytes; under a KiB, ordinary events would be refused
	// and go dead.
	MaxMessageBytesFloor = 1024
)

// Config tunes NewPublisher. The zero value is valid.
type Config struct {
	// ClientID is reported to the brokers. Default "txoutbox".
	ClientID string

	// TLS enables TLS with this configuration when not nil.
	TLS *tls.Config

	// SASL enables SASL authentication when Mechanism is set.
	SASL SASLConfig

	// MaxMessageBytes is the largest record the producer sends. Default
	// MaxMessageBytesDefault, Kafka's default message.max.bytes; at least
	// MaxMessageBytesFloor (1 KiB). Larger events fail to publish and,
	// after MaxAttempts, become dead.
	MaxMessageBytes int

	// Timeout bounds dialing, each request and the wait for the brokers'
	// acknowledgement. Default TimeoutDefault (10s); at least
	// TimeoutFloor (100ms).
	Timeout time.Duration

	// Version is the Kafka protocol version to speak. Default 2.8.0.
	Version sarama.KafkaVersion

	// Compression compresses record batches: sarama.CompressionNone (the
	// default), CompressionGZIP, CompressionSnappy, CompressionLZ4 or
	// CompressionZSTD (which needs Version 2.1.0 or later).
	Compression sarama.CompressionCodec

	// Linger is how long the producer waits, after a record comes to a
	// broker's empty buffer, for more to send in the same request
	// (Sarama's Producer.Flush.Frequency; like Kafka's linger.ms, though
	// a buffer is not sent early when it fills a batch.size). Default
	// LingerDefault; negative sends the buffer as soon as the broker has
	// answered the request before; it must be below Timeout. Each
	// request costs the brokers about the same whatever it holds, so
	// fewer, fuller requests cost them less per event
	// (docs/performance.md). Every publish waits up to Linger more for
	// its acknowledgement, and the relay publishes an aggregate's next
	// event only once the last one is acknowledged: one aggregate's
	// events go out at most one per Linger plus a round trip (under 200
	// a second at 5 ms). For a few hot aggregates, lower it or set it
	// negative. Publish sends its messages one after another, each with
	// its wait; PublishBatch sends them together.
	Linger time.Duration

	// Logger receives the publisher's logs: each message the brokers
	// refused, at debug level, with its topic and key (its caller
	// gets the error too). Default: slog.Default(). Sarama itself logs
	// through the package-level sarama.Logger, which a library must not
	// set for its host program: set it with SaramaLogger.
	Logger *slog.Logger

	// Configure, if set, is called last with the Sarama configuration,
	// as an escape hatch for settings not covered here. Do not lower
	// RequiredAcks or raise Net.MaxOpenRequests: durability and per-key
	// order rest on them (Sarama refuses the idempotent producer with more
	// than one request in flight).
	Configure func(*sarama.Config)
}

// SASLConfig holds SASL credentials.
type SASLConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. Empty disables
	// SASL. SCRAM needs a client implementation: set
	// Net.SASL.SCRAMClientGeneratorFunc in Config.Configure (Sarama
	// validates that it is set).
	Mechanism string
	User      string
	Password  string
}

// LingerDefault is Config.Linger's default, the Java producer's linger.ms
// since Kafka 4.0. Without it, a relay publishing well below the brokers'
// capacity sent a request for every few records, and on a replicated
// cluster the brokers spent more CPU per event than the relay and
// PostgreSQL together.
const LingerDefault = 5 * time.Millisecond

// NewPublisher returns a Watermill publisher to Kafka set up for the
// relay:
//
//   - the message key is the aggregate id, so one aggregate's events land on
//     one partition, in order;
//   - acks from all in-sync replicas, and one request in flight per broker,
//     so an internal retry cannot reorder a partition's records (the relay
//     also never has two events of one aggregate in flight);
//   - Sarama's idempotent producer, so an internal retry of a batch the
//     broker stored but did not acknowledge does not store it twice.
//     Sarama before v1.46.3 sent records buffered during a retry without a
//     sequence number (IBM/sarama#3354) and acknowledged records the
//     broker never stored (integration/relaye2e's
//     TestKafkaPublisherRetriesStoreOnce loses hundreds with v1.43.3).
//     This module requires a Sarama with the fix. Brokers that refuse idempotent writes (a
//     cluster whose ACLs deny IdempotentWrite, before Kafka 2.8) need it
//     off: set Producer.Idempotent = false in Configure;
//   - no broker to dial is an outage, not an error: a publisher made while
//     Kafka is away (a relay restarted during an outage) connects at a
//     later publish, failing the ones before as in any outage; brokers
//     that answer and refuse or hang up (SASL, a certificate, TLS against
//     a plaintext listener, the configuration) fail NewPublisher;
//   - records wait up to Config.Linger (5 ms by default) to share a
//     produce request, which costs the brokers far less per record than
//     a request for every few;
//   - Publish returns only after the acknowledgement;
//   - a record over its topic's max.message.bytes (read from the cluster
//     on the topic's first message and every minute after) is refused
//     before it is sent: the broker's refusal would make the idempotent
//     producer bump its epoch and send the other partitions' unacknowledged
//     batches again, duplicating healthy events. Without compression only,
//     and only once the limit is known; a principal without
//     DescribeConfigs on the topic leaves it to the broker. Records are
//     batched up to MaxMessageBytes, not the topic's limit: on a topic
//     whose max.message.bytes is below MaxMessageBytes, a batch of records
//     that each fit can still be refused (each is then sent alone, and
//     stored, but the epoch was bumped); set MaxMessageBytes to the
//     smallest limit of the topics you publish to;
//   - the errors that are the message's own fault (too large, a topic that
//     is invalid, unknown or not authorised, a record the topic refuses)
//     are marked relay.Permanent, so only those can make an event dead;
//     the rest (brokers or the network away, leader elections, not enough
//     replicas, timeouts) are outages the relay retries until they end;
//   - the Watermill message UUID (the event id) and all metadata (event id,
//     type, aggregate type and id, creation time, content type and the
//     event's headers) travel as Kafka headers, encoded by watermill-kafka's
//     marshaler, so watermill-kafka subscribers read them as usual.
//
// Close it after the relay's Run has returned.
func NewPublisher(brokers []string, cfg Config) (*Publisher, error) {
	if len(brokers) == 0 {
		return nil, errors.New("kafkapub: no brokers")
	}
	sc, err := cfg.sarama()
	if err != nil {
		return nil, fmt.Errorf("kafkapub: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	p := &Publisher{
		marshaler: kafka.NewWithPartitioningMarshaler(aggregateKey),
		logger:    logger,
		brokers:   brokers,
		config:    sc,
	}
	if sc.Producer.Compression == sarama.CompressionNone {
		// Compressed, a batch may fit however large its records are: only
		// the broker can tell.
		p.limits = newTopicLimits(brokers, sc)
	}
	producer, err := sarama.NewSyncProducer(brokers, sc)
	switch {
	case err == nil:
		p.producer.Store(&syncProducer{producer})
	case unreachable(err):
		logger.Warn("kafkapub: no broker answers; connecting again at the next publish", "brokers", brokers, "err", err)
	default:
		return nil, fmt.Errorf("kafkapub: cannot create Kafka producer: %w", err)
	}
	return p, nil
}

// unreachable reports whether err, from making a producer, says only that
// no broker could be dialled (connection refused, no route, a dial
// timeout): an outage, which a relay started during it waits out (the
// first publishes fail as any publish in an outage does). Anything else,
// a broker that answered and refused or hung up (authentication, a
// certificate, TLS against a plaintext listener, the configuration),
// fails NewPublisher, at start.
func unreachable(err error) bool {
	if !errors.Is(err, sarama.ErrOutOfBrokers) {
		return false
	}
	var causes []error
	var walk func(error)
	walk = func(e error) {
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, c := range u.Unwrap() {
				walk(c)
			}
		default:
			causes = append(causes, e)
		}
	}
	if u, ok := err.(interface{ Unwrap() error }); ok && u.Unwrap() != nil {
		walk(u.Unwrap())
	}
	for _, c := range causes {
		var op *net.OpError
		if !errors.As(c, &op) || op.Op != "dial" {
			return false
		}
	}
	return len(causes) > 0
}

// syncProducer boxes the producer for an atomic pointer.
type syncProducer struct{ sarama.SyncProducer }

// sender returns the producer, making it if NewPublisher could not reach
// a broker. One call at a time tries; the others fail at once, as in an
// outage, rather than queue behind its metadata timeouts.
func (p *Publisher) sender() (sarama.SyncProducer, error) {
	if sp := p.producer.Load(); sp != nil {
		return sp.SyncProducer, nil
	}
	if !p.connect.TryLock() {
		return nil, errConnecting
	}
	defer p.connect.Unlock()
	if sp := p.producer.Load(); sp != nil {
		return sp.SyncProducer, nil
	}
	producer, err := sarama.NewSyncProducer(p.brokers, p.config)
	if err != nil {
		return nil, fmt.Errorf("kafkapub: cannot reach Kafka: %w", err)
	}
	p.producer.Store(&syncProducer{producer})
	if p.closed.Load() {
		return nil, ErrClosed // Close ran meanwhile: it closes the producer
	}
	p.logger.Info("kafkapub: connected to Kafka", "brokers", p.brokers)
	return producer, nil
}

// errConnecting fails a publish while another one is making the producer.
var errConnecting = errors.New("kafkapub: connecting to Kafka")

// Publisher publishes Watermill messages to Kafka through a Sarama
// synchronous producer, with watermill-kafka's marshaler. It is a
// message.Publisher, and a relay.BatchPublisher: PublishBatch sends many
// messages at once, which lets the relay keep many events in flight.
type Publisher struct {
	// producer is nil until a broker answered (see sender).
	producer  atomic.Pointer[syncProducer]
	connect   sync.Mutex
	marshaler kafka.Marshaler
	logger    *slog.Logger

	// solo sends a message the broker refused as too large once more, in
	// a request of its own (see sendAlone); made on first use.
	brokers []string
	config  *sarama.Config
	soloMu  sync.Mutex
	solo    sarama.SyncProducer

	// limits refuses a record over its topic's max.message.bytes before
	// it is sent (see limits.go); nil with compression.
	limits *topicLimits

	// closed is set by Close. It is an atomic flag, not a lock around
	// every send: Close must not run while a call is in progress (close
	// the publisher after the relay's Run has returned), and a lock taken
	// per message costs the 64 lanes more than it guards.
	closed atomic.Bool
}

// ErrClosed is returned by a Publisher's Publish and PublishBatch after
// Close.
var ErrClosed = errors.New("kafkapub: publisher closed")

// Publish publishes msgs to topic one after another, as watermill-kafka's
// publisher does: each is acknowledged before the next is sent, and the
// first failure ends the call.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if p.closed.Load() {
		return ErrClosed
	}
	producer, err := p.sender()
	if err != nil {
		return err
	}
	for _, msg := range msgs {
		km, err := p.marshaler.Marshal(topic, msg)
		if err != nil {
			return relay.Permanent(fmt.Errorf("kafkapub: cannot marshal message %s: %w", msg.UUID, err))
		}
		if err := p.tooLarge(km); err != nil {
			p.logFailure(km, err)
			return fmt.Errorf("kafkapub: cannot produce message %s: %w", msg.UUID, err)
		}
		_, _, err = producer.SendMessage(km)
		if errors.Is(err, sarama.ErrMessageSizeTooLarge) {
			err = p.sendAlone(topic, msg)
		}
		if err != nil {
			p.logFailure(km, err)
			return classify(fmt.Errorf("kafkapub: cannot produce message %s: %w", msg.UUID, err))
		}
	}
	return nil
}

// sendAlone sends msg again in a produce request that holds nothing else,
// on a producer of its own, one message at a time. The broker refuses a
// whole record batch when one record in it is over the topic's
// max.message.bytes, and the producer batches the messages of every
// concurrent call bound for a partition: MESSAGE_TOO_LARGE says that some
// message of the batch was too large, and only a message sent alone is
// refused for itself. It is marshalled anew: Sarama keeps a sent
// message's retry state.
func (p *Publisher) sendAlone(topic string, msg *message.Message) error {
	km, err := p.marshaler.Marshal(topic, msg)
	if err != nil {
		return relay.Permanent(fmt.Errorf("cannot marshal message %s: %w", msg.UUID, err))
	}
	p.soloMu.Lock()
	defer p.soloMu.Unlock()
	if p.solo == nil {
		// Its requests hold one message each: a linger would only delay
		// them, one after another under soloMu.
		sc := *p.config
		sc.Producer.Flush.Frequency = 0
		if p.solo, err = sarama.NewSyncProducer(p.brokers, &sc); err != nil {
			return fmt.Errorf("producer for a message refused as too large: %w", err)
		}
	}
	_, _, err = p.solo.SendMessage(km)
	return err
}

// PublishBatch publishes msgs[i] to topics[i], all at once, and returns
// once each was acknowledged or failed: nil when all were acknowledged,
// otherwise each message's error (nil for those acknowledged). Messages
// with the same key keep their order in the partition while none fails;
// when one fails, a later one with its key may still be stored, so a
// caller that needs per-key order after failures (the relay does) sends
// at most one message per key in a call.
func (p *Publisher) PublishBatch(topics []string, msgs []*message.Message) []error {
	if len(topics) != len(msgs) {
		return repeat(fmt.Errorf("kafkapub: %d topics for %d messages", len(topics), len(msgs)), len(msgs))
	}
	if p.closed.Load() {
		return repeat(ErrClosed, len(msgs))
	}
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = err
	}
	send := make([]*sarama.ProducerMessage, 0, len(msgs))
	index := make(map[*sarama.ProducerMessage]int, len(msgs))
	for i, msg := range msgs {
		km, err := p.marshaler.Marshal(topics[i], msg)
		if err != nil {
			fail(i, relay.Permanent(fmt.Errorf("kafkapub: cannot marshal message %s: %w", msg.UUID, err)))
			continue
		}
		if err := p.tooLarge(km); err != nil {
			p.logFailure(km, err)
			fail(i, fmt.Errorf("kafkapub: cannot produce message %s: %w", msg.UUID, err))
			continue
		}
		index[km] = i
		send = append(send, km)
	}
	if len(send) == 0 {
		return errs
	}
	producer, err := p.sender()
	if err != nil {
		for _, km := range send {
			fail(index[km], err)
		}
		return errs
	}
	err = producer.SendMessages(send)
	if err == nil {
		return errs
	}
	// Per message, unless the error is not, or names a message not of
	// this call: then nothing tells which failed, and none counts as
	// acknowledged.
	var perMessage sarama.ProducerErrors
	if !errors.As(err, &perMessage) || slices.ContainsFunc(perMessage, func(pe *sarama.ProducerError) bool {
		_, ok := index[pe.Msg]
		return !ok
	}) {
		for _, km := range send {
			fail(index[km], classify(fmt.Errorf("kafkapub: cannot produce message %s: %w", msgs[index[km]].UUID, err)))
		}
		return errs
	}
	for _, pe := range perMessage {
		i := index[pe.Msg]
		err := pe.Err
		if errors.Is(err, sarama.ErrMessageSizeTooLarge) {
			err = p.sendAlone(topics[i], msgs[i]) // see sendAlone
			if err == nil {
				continue
			}
		}
		p.logFailure(pe.Msg, err)
		fail(i, classify(fmt.Errorf("kafkapub: cannot produce message %s: %w", msgs[i].UUID, err)))
	}
	return errs
}

// tooLarge refuses km when it cannot fit its topic's max.message.bytes.
func (p *Publisher) tooLarge(km *sarama.ProducerMessage) error {
	if p.limits == nil {
		return nil
	}
	return p.limits.check(km)
}

func (p *Publisher) logFailure(km *sarama.ProducerMessage, err error) {
	p.logger.Debug("kafkapub: message not produced", "topic", km.Topic, "key", km.Key, "err", err)
}

func repeat(err error, n int) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// MaxRecordBytes is the largest record the producer sends
// (Config.MaxMessageBytes). The relay's claim check
// (relay.LargePayloadsConfig) takes its default threshold from it, safely
// under it.
func (p *Publisher) MaxRecordBytes() int { return p.config.Producer.MaxMessageBytes }

// Close closes the producer. Call it once no Publish or PublishBatch is
// in progress (after the relay's Run has returned); later calls do
// nothing.
func (p *Publisher) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	var err error
	// A connect in progress (up to the dial and metadata timeouts against
	// brokers that do not answer) is not waited for: its producer, if it
	// makes one, is closed once it is done.
	if p.connect.TryLock() {
		if sp := p.producer.Swap(nil); sp != nil {
			err = sp.Close()
		}
		p.connect.Unlock()
	} else {
		go func() {
			p.connect.Lock()
			defer p.connect.Unlock()
			if sp := p.producer.Swap(nil); sp != nil {
				_ = sp.Close()
			}
		}()
	}
	p.soloMu.Lock()
	if p.solo != nil {
		err = errors.Join(err, p.solo.Close())
	}
	p.soloMu.Unlock()
	if p.limits != nil {
		err = errors.Join(err, p.limits.close())
	}
	if err != nil {
		return fmt.Errorf("kafkapub: cannot close Kafka producer: %w", err)
	}
	return nil
}

// aggregateKey makes the aggregate id the Kafka message key.
func aggregateKey(_ string, msg *message.Message) (string, error) {
	return msg.Metadata.Get(txoutbox.HeaderAggregateID), nil
}

// Validate reports whether c is a configuration NewPublisher accepts,
// without connecting to anything: its durations and sizes at or above
// their floors (zero takes the default), Linger below Timeout, a SASL
// mechanism it knows. NewPublisher also runs Sarama's own checks and
// Configure.
func (c Config) Validate() error {
	_, err := c.checked()
	if err != nil {
		return fmt.Errorf("kafkapub: %w", err)
	}
	return nil
}

// checked validates c and returns its timeout, the default if unset.
func (c Config) checked() (timeout time.Duration, err error) {
	timeout = cmp.Or(c.Timeout, TimeoutDefault)
	switch {
	case timeout < TimeoutFloor:
		return 0, fmt.Errorf("Timeout %s is below its floor %s", c.Timeout, TimeoutFloor)
	case c.MaxMessageBytes != 0 && c.MaxMessageBytes < MaxMessageBytesFloor:
		return 0, fmt.Errorf("MaxMessageBytes %d is below its floor %d", c.MaxMessageBytes, MaxMessageBytesFloor)
	case c.Linger >= timeout:
		return 0, fmt.Errorf("Linger %v is not below Timeout %v: every publish would time out", c.Linger, timeout)
	}
	switch c.SASL.Mechanism {
	case "", sarama.SASLTypePlaintext, sarama.SASLTypeSCRAMSHA256, sarama.SASLTypeSCRAMSHA512:
	default:
		return 0, fmt.Errorf("unsupported SASL mechanism %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", c.SASL.Mechanism)
	}
	return timeout, nil
}

func (cfg Config) sarama() (*sarama.Config, error) {
	timeout, err := cfg.checked()
	if err != nil {
		return nil, err
	}
	sc := sarama.NewConfig()
	sc.ClientID = "txoutbox"
	if cfg.ClientID != "" {
		sc.ClientID = cfg.ClientID
	}
	sc.Version = sarama.V2_8_0_0
	if cfg.Version != (sarama.KafkaVersion{}) {
		sc.Version = cfg.Version
	}
	sc.Net.DialTimeout, sc.Net.ReadTimeout, sc.Net.WriteTimeout = timeout, timeout, timeout
	sc.Producer.Timeout = timeout
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Idempotent = true
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Retry.Max = 5
	sc.Producer.Retry.Backoff = 100 * time.Millisecond
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	sc.Producer.MaxMessageBytes = cmp.Or(cfg.MaxMessageBytes, MaxMessageBytesDefault)
	sc.Metadata.Retry.Backoff = 250 * time.Millisecond
	switch {
	case cfg.Linger == 0:
		sc.Producer.Flush.Frequency = LingerDefault
	case cfg.Linger > 0:
		sc.Producer.Flush.Frequency = cfg.Linger
	}
	sc.Producer.Compression = cfg.Compression
	if cfg.TLS != nil {
		sc.Net.TLS.Enable = true
		sc.Net.TLS.Config = cfg.TLS
	}
	if cfg.SASL.Mechanism != "" {
		sc.Net.SASL.Enable = true
		sc.Net.SASL.User = cfg.SASL.User
		sc.Net.SASL.Password = cfg.SASL.Password
		sc.Net.SASL.Mechanism = sarama.SASLMechanism(cfg.SASL.Mechanism)
	}
	if cfg.Configure != nil {
		cfg.Configure(sc)
	}
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("sarama config: %w", err)
	}
	return sc, nil
}
