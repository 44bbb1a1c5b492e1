package kafkapub

import (
	"errors"
	"slices"
	"strings"

	"github.com/IBM/sarama"

	"github.com/txoutbox/txoutbox/relay"
)

// refusals are the Kafka errors that are the message's own fault: the
// broker refuses that message and would refuse it again. The relay makes
// an event dead only for those (see relay.Permanent). Every other error
// (a broker or the network away, leader elections, not enough in-sync
// replicas, timeouts, Sarama's circuit breaker or its running out of
// brokers) is an outage, retried until it ends.
var refusals = []sarama.KError{
	sarama.ErrMessageSizeTooLarge,      // MESSAGE_TOO_LARGE
	sarama.ErrInvalidTopic,             // INVALID_TOPIC_EXCEPTION: a name that cannot exist
	sarama.ErrUnknownTopicOrPartition,  // a topic that does not exist, with auto-creation off
	sarama.ErrTopicAuthorizationFailed, // TOPIC_AUTHORIZATION_FAILED on that topic
	sarama.ErrInvalidRecord,            // INVALID_RECORD: refused by the topic's rules (a compacted topic's missing key)
	sarama.ErrInvalidTimestamp,         // INVALID_TIMESTAMP: outside message.timestamp.difference.max.ms
}

// classify marks err, a message's produce error, as permanent when it is
// the message's own fault.
func classify(err error) error {
	var kerr sarama.KError
	if errors.As(err, &kerr) && slices.Contains(refusals, kerr) {
		return relay.Permanent(err)
	}
	// Sarama refuses an oversize record itself, before any broker sees it.
	var cerr sarama.ConfigurationError
	if errors.As(err, &cerr) && strings.Contains(string(cerr), "larger than configured Producer.MaxMessageBytes") {
		return relay.Permanent(err)
	}
	return err
}
