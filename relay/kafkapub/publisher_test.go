package kafkapub_test

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

func TestNewPublisherValidatesConfig(t *testing.T) {
	t.Parallel()
	if _, err := kafkapub.NewPublisher(nil, kafkapub.Config{}); err == nil || !strings.Contains(err.Error(), "no brokers") {
		t.Errorf("NewPublisher(nil) = %v", err)
	}
	if _, err := kafkapub.NewPublisher([]string{"127.0.0.1:1"}, kafkapub.Config{SASL: kafkapub.SASLConfig{Mechanism: "GSSAPI"}}); err == nil ||
		!strings.Contains(err.Error(), `unsupported SASL mechanism "GSSAPI"`) {
		t.Errorf("NewPublisher(GSSAPI) = %v", err)
	}
}

func TestNewPublisherRefusesReorderingSettings(t *testing.T) {
	t.Parallel()
	// Several requests in flight could reorder a partition on retry;
	// Sarama's idempotent producer, on by default, refuses them.
	_, err := kafkapub.NewPublisher([]string{"127.0.0.1:1"}, kafkapub.Config{
		Configure: func(sc *sarama.Config) { sc.Net.MaxOpenRequests = 5 },
	})
	if err == nil || !strings.Contains(err.Error(), "MaxOpenRequests") {
		t.Errorf("NewPublisher with 5 requests in flight = %v, want Sarama's refusal", err)
	}
}

// Only brokers that cannot be dialled are an outage NewPublisher waits
// out; an address that answers and hangs up (TLS or SASL against a
// listener without them, another protocol) fails it at start.
func TestNewPublisherTellsAnOutageFromAMisconfiguration(t *testing.T) {
	t.Parallel()
	hangUp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hangUp.Close()
	go func() {
		for {
			c, err := hangUp.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()

	p, err := kafkapub.NewPublisher([]string{refused}, kafkapub.Config{Timeout: time.Second})
	if err != nil {
		t.Fatalf("NewPublisher with nothing listening = %v, want a publisher that connects later", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]kafkapub.Config{
		"tls":  {TLS: &tls.Config{}, Timeout: time.Second},
		"sasl": {SASL: kafkapub.SASLConfig{Mechanism: "PLAIN", User: "u", Password: "p"}, Timeout: time.Second},
	} {
		if p, err := kafkapub.NewPublisher([]string{hangUp.Addr().String()}, cfg); err == nil {
			_ = p.Close()
			t.Errorf("%s against an address that hangs up: NewPublisher succeeded, want the refusal at start", name)
		}
	}
}

// MaxRecordBytes reports Config.MaxMessageBytes, its default when zero:
// the relay's claim check takes its threshold from it.
func TestMaxRecordBytesIsTheProducersLimit(t *testing.T) {
	t.Parallel()
	for cfg, want := range map[int]int{0: kafkapub.MaxMessageBytesDefault, 5000: 5000} {
		p, err := kafkapub.NewPublisher([]string{"127.0.0.1:1"}, kafkapub.Config{MaxMessageBytes: cfg})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.MaxRecordBytes(); got != want {
			t.Errorf("MaxMessageBytes %d: MaxRecordBytes() = %d, want %d", cfg, got, want)
		}
		p.Close()
	}
}
