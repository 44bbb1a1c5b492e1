package kafkapub

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/IBM/sarama"
	"github.com/eapache/go-resiliency/breaker"

	"github.com/txoutbox/txoutbox/relay"
)

// Kafka's refusals of a message are permanent (the relay may make the event
// dead); brokers away, elections and timeouts are outages.
func TestClassifyRefusalsAsPermanent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err       error
		permanent bool
	}{
		{sarama.ErrMessageSizeTooLarge, true},
		{sarama.ErrInvalidTopic, true},
		{sarama.ErrUnknownTopicOrPartition, true},
		{sarama.ErrTopicAuthorizationFailed, true},
		{sarama.ErrInvalidRecord, true},
		{sarama.ConfigurationError("Attempt to produce message larger than configured Producer.MaxMessageBytes: 3000 > 2048"), true},
		{sarama.ErrNotEnoughReplicas, false},
		{sarama.ErrNotEnoughReplicasAfterAppend, false},
		{sarama.ErrLeaderNotAvailable, false},
		{sarama.ErrNotLeaderForPartition, false},
		{sarama.ErrRequestTimedOut, false},
		{sarama.ErrOutOfBrokers, false},
		{sarama.ErrNotConnected, false},
		{sarama.ErrClusterAuthorizationFailed, false},
		{breaker.ErrBreakerOpen, false},
		{io.EOF, false},
		{ErrClosed, false},
	} {
		err := classify(fmt.Errorf("kafkapub: cannot produce message x: %w", c.err))
		if got := relay.IsPermanent(err); got != c.permanent {
			t.Errorf("%v: permanent %v, want %v", c.err, got, c.permanent)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%v: lost in classify", c.err)
		}
	}
}
