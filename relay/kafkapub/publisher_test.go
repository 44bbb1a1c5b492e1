package kafkapub_test

import (
	"strings"
	"testing"

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
