package main

import (
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"

	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// kafkaFlags are the relay's connection settings for a Kafka cluster.
type kafkaFlags struct {
	brokers     string
	devBroker   bool
	clientID    string
	version     string
	compression string
	linger      time.Duration

	tls, tlsSkipVerify     bool
	tlsCA, tlsCert, tlsKey string

	saslMechanism, saslUser, saslPassword string
}

func (k *kafkaFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.brokers, "brokers", "", "comma-separated Kafka brokers")
	fs.BoolVar(&k.devBroker, "dev-broker", false, "with no brokers, start an embedded in-memory Kafka-protocol broker: for development only, everything it holds is lost on exit")
	fs.StringVar(&k.clientID, "kafka-client-id", "txoutbox", "client id reported to the brokers (quotas, broker logs)")
	fs.StringVar(&k.version, "kafka-version", "2.8.0", "Kafka protocol version to speak, at most the cluster's")
	fs.StringVar(&k.compression, "kafka-compression", "none", "compress record batches: none, gzip, snappy, lz4 or zstd")
	fs.DurationVar(&k.linger, "kafka-linger", kafkapub.LingerDefault, "how long the producer waits for more records to send in the same request (linger.ms); 0 sends at once; below the producer's 10s timeout")
	fs.BoolVar(&k.tls, "tls", false, "connect to the brokers with TLS (implied by the other --tls-* flags), verifying them against the system's CAs")
	fs.StringVar(&k.tlsCA, "tls-ca", "", "PEM file of the CA certificates that sign the brokers' certificates, instead of the system's")
	fs.StringVar(&k.tlsCert, "tls-cert", "", "PEM file of the client certificate, for brokers that require one (with --tls-key)")
	fs.StringVar(&k.tlsKey, "tls-key", "", "PEM file of the client certificate's private key")
	fs.BoolVar(&k.tlsSkipVerify, "tls-insecure-skip-verify", false, "do not verify the brokers' certificates: anyone on the path can read and change the events; for tests only")
	fs.StringVar(&k.saslMechanism, "sasl-mechanism", "", "SASL authentication: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: none)")
	fs.StringVar(&k.saslUser, "sasl-user", "", "SASL user name")
	fs.StringVar(&k.saslPassword, "sasl-password", "", "SASL password; prefer the variable, which ps does not show")
}

// config validates the flags and builds the publisher's configuration,
// reading the TLS files, without connecting to anything. Every error is a
// usage error.
func (k *kafkaFlags) config(logger *slog.Logger) (kafkapub.Config, error) {
	cfg := kafkapub.Config{ClientID: k.clientID, Logger: logger}
	if strings.TrimSpace(k.clientID) == "" {
		return cfg, usagef("--kafka-client-id is empty")
	}
	v, err := sarama.ParseKafkaVersion(k.version)
	if err != nil {
		return cfg, usagef("--kafka-version: %v", err)
	}
	cfg.Version = v
	if err := cfg.Compression.UnmarshalText([]byte(k.compression)); err != nil {
		return cfg, usagef("--kafka-compression: want none, gzip, snappy, lz4 or zstd, not %q", k.compression)
	}
	if cfg.Compression == sarama.CompressionZSTD && !v.IsAtLeast(sarama.V2_1_0_0) {
		return cfg, usagef("--kafka-compression zstd needs --kafka-version 2.1.0 or later")
	}
	switch {
	case k.linger < 0:
		return cfg, usagef("--kafka-linger %v is below its floor 0", k.linger)
	case k.linger >= kafkapub.TimeoutDefault:
		return cfg, usagef("--kafka-linger %v is not below the producer's timeout, %v: every publish would time out", k.linger, kafkapub.TimeoutDefault)
	case k.linger == 0:
		cfg.Linger = -1 // kafkapub's "none"
	default:
		cfg.Linger = k.linger
	}
	if cfg.TLS, err = k.tlsConfig(); err != nil {
		return cfg, err
	}
	if err := k.sasl(&cfg); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, flagUsage(err)
	}
	return cfg, nil
}

func (k *kafkaFlags) tlsConfig() (*tls.Config, error) {
	if !k.tls && k.tlsCA == "" && k.tlsCert == "" && k.tlsKey == "" && !k.tlsSkipVerify {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: k.tlsSkipVerify} //nolint:gosec // only behind --tls-insecure-skip-verify
	if k.tlsCA != "" {
		pem, err := os.ReadFile(k.tlsCA)
		if err != nil {
			return nil, usagef("--tls-ca: %v", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usagef("--tls-ca: no PEM certificate in %s", k.tlsCA)
		}
	}
	if (k.tlsCert == "") != (k.tlsKey == "") {
		return nil, usagef("--tls-cert and --tls-key go together")
	}
	if k.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(k.tlsCert, k.tlsKey)
		if err != nil {
			return nil, usagef("--tls-cert/--tls-key: %v", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

func (k *kafkaFlags) sasl(cfg *kafkapub.Config) error {
	if k.saslMechanism == "" {
		if k.saslUser != "" || k.saslPassword != "" {
			return usagef("--sasl-user or --sasl-password without --sasl-mechanism")
		}
		return nil
	}
	var hash scram.HashGeneratorFcn
	switch k.saslMechanism {
	case sarama.SASLTypePlaintext:
	case sarama.SASLTypeSCRAMSHA256:
		hash = sha256.New
	case sarama.SASLTypeSCRAMSHA512:
		hash = sha512.New
	default:
		return usagef("--sasl-mechanism: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, not %q", k.saslMechanism)
	}
	if k.saslUser == "" || k.saslPassword == "" {
		return usagef("--sasl-mechanism %s needs --sasl-user and --sasl-password (or %s)", k.saslMechanism, envName("sasl-password"))
	}
	cfg.SASL = kafkapub.SASLConfig{Mechanism: k.saslMechanism, User: k.saslUser, Password: k.saslPassword}
	if hash != nil {
		cfg.Configure = func(sc *sarama.Config) {
			sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: hash} }
		}
	}
	return nil
}

// logAttrs describes the connection for the log: where, and how it
// authenticates, never with what secret.
func (k *kafkaFlags) logAttrs(brokers []string) []any {
	attrs := []any{"brokers", strings.Join(brokers, ","), "client_id", k.clientID, "kafka_version", k.version, "compression", k.compression}
	if tc, _ := k.tlsConfig(); tc != nil {
		attrs = append(attrs, "tls", true, "tls_ca", orDefault(k.tlsCA, "system"), "tls_client_cert", orDefault(k.tlsCert, "none"),
			"tls_insecure_skip_verify", k.tlsSkipVerify)
	} else {
		attrs = append(attrs, "tls", false)
	}
	if k.saslMechanism != "" {
		attrs = append(attrs, "sasl", k.saslMechanism, "sasl_user", k.saslUser)
	}
	return attrs
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// scramClient is Sarama's SCRAM conversation on github.com/xdg-go/scram,
// as in Sarama's own SASL/SCRAM example: Sarama ships none.
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

var _ sarama.SCRAMClient = (*scramClient)(nil)

func (s *scramClient) Begin(user, password, authzID string) error {
	c, err := s.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	s.conv = c.NewConversation()
	return nil
}

func (s *scramClient) Step(challenge string) (string, error) { return s.conv.Step(challenge) }

func (s *scramClient) Done() bool { return s.conv.Done() }
