package kafkapub

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
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
	// 1048588, Kafka's default message.max.bytes. Larger events fail to
	// publish and, after MaxAttempts, become dead.
	MaxMessageBytes int

	// Timeout bounds dialing, each request and the wait for the brokers'
	// acknowledgement. Default 10s.
	Timeout time.Duration

	// Version is the Kafka protocol version to speak. Default 2.8.0.
	Version sarama.KafkaVersion

	// Compression compresses record batches: sarama.CompressionNone (the
	// default), CompressionGZIP, CompressionSnappy, CompressionLZ4 or
	// CompressionZSTD (which needs Version 2.1.0 or later).
	Compression sarama.CompressionCodec

	// Logger receives watermill-kafka's logs, so its errors are not
	// dropped. Default: slog.Default(). Sarama itself logs through the
	// package-level sarama.Logger, which a library must not set for its
	// host program: set it with SaramaLogger.
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

// NewPublisher returns a watermill-kafka publisher set up for the
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
//     broker never stored (integration/relaytest's
//     TestKafkaPublisherRetriesStoreOnce loses hundreds with v1.43.3).
//     This module requires a Sarama with the fix. Brokers that refuse idempotent writes (a
//     cluster whose ACLs deny IdempotentWrite, before Kafka 2.8) need it
//     off: set Producer.Idempotent = false in Configure;
//   - Publish returns only after the acknowledgement;
//   - the Watermill message UUID (the event id) and all metadata (event id,
//     type, aggregate type and id, creation time, content type and the
//     event's headers) travel as Kafka headers.
//
// Close it after the relay's Run has returned.
func NewPublisher(brokers []string, cfg Config) (message.Publisher, error) {
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
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{
		Brokers:               brokers,
		Marshaler:             kafka.NewWithPartitioningMarshaler(aggregateKey),
		OverwriteSaramaConfig: sc,
	}, watermill.NewSlogLogger(logger))
	if err != nil {
		return nil, fmt.Errorf("kafkapub: %w", err)
	}
	return pub, nil
}

// aggregateKey makes the aggregate id the Kafka message key.
func aggregateKey(_ string, msg *message.Message) (string, error) {
	return msg.Metadata.Get(txoutbox.HeaderAggregateID), nil
}

func (cfg Config) sarama() (*sarama.Config, error) {
	sc := sarama.NewConfig()
	sc.ClientID = "txoutbox"
	if cfg.ClientID != "" {
		sc.ClientID = cfg.ClientID
	}
	sc.Version = sarama.V2_8_0_0
	if cfg.Version != (sarama.KafkaVersion{}) {
		sc.Version = cfg.Version
	}
	timeout := 10 * time.Second
	if cfg.Timeout > 0 {
		timeout = cfg.Timeout
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
	sc.Producer.MaxMessageBytes = 1048588
	if cfg.MaxMessageBytes > 0 {
		sc.Producer.MaxMessageBytes = cfg.MaxMessageBytes
	}
	sc.Metadata.Retry.Backoff = 250 * time.Millisecond
	sc.Producer.Compression = cfg.Compression
	if cfg.TLS != nil {
		sc.Net.TLS.Enable = true
		sc.Net.TLS.Config = cfg.TLS
	}
	if cfg.SASL.Mechanism != "" {
		sc.Net.SASL.Enable = true
		sc.Net.SASL.User = cfg.SASL.User
		sc.Net.SASL.Password = cfg.SASL.Password
		switch cfg.SASL.Mechanism {
		case sarama.SASLTypePlaintext, sarama.SASLTypeSCRAMSHA256, sarama.SASLTypeSCRAMSHA512:
			sc.Net.SASL.Mechanism = sarama.SASLMechanism(cfg.SASL.Mechanism)
		default:
			return nil, fmt.Errorf("unsupported SASL mechanism %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", cfg.SASL.Mechanism)
		}
	}
	if cfg.Configure != nil {
		cfg.Configure(sc)
	}
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("sarama config: %w", err)
	}
	return sc, nil
}
