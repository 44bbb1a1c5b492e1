package kafkapub

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// A record over its topic's max.message.bytes is refused here, before it
// is sent. Refused by the broker instead, it would make the idempotent
// producer bump its epoch, and the producer then sends the other
// partitions' unacknowledged batches again under the new epoch, where the
// broker cannot tell them from new ones: duplicates of healthy events,
// one in-flight window per refusal (measured on the 3-broker cluster: 235
// duplicates of 2,038 events around 9 refused ones).

// limitTTL is how long a topic's max.message.bytes is trusted before it is
// read again (an operator may change it).
const limitTTL = time.Minute

// recordBatchOverhead is the size of a record batch's header (magic v2):
// the broker compares the batch, header included, with max.message.bytes.
const recordBatchOverhead = 61

// topicLimits knows each topic's max.message.bytes. A topic's first
// message starts reading it (DescribeConfigs) in the background and is
// sent unchecked; so is every message while the limit cannot be read (an
// outage, no DescribeConfigs permission on the topic).
type topicLimits struct {
	brokers []string
	config  *sarama.Config

	mu      sync.Mutex
	admin   sarama.ClusterAdmin // made on first use
	byTopic map[string]*topicLimit
	closed  bool
}

type topicLimit struct {
	bytes    int // 0: not known
	read     time.Time
	fetching bool
}

func newTopicLimits(brokers []string, sc *sarama.Config) *topicLimits {
	// The look-up waits on the brokers off the publish path; a short
	// timeout keeps one admin connection from lingering in an outage.
	ac := *sc
	ac.Net.DialTimeout, ac.Net.ReadTimeout, ac.Net.WriteTimeout = 5*time.Second, 5*time.Second, 5*time.Second
	return &topicLimits{brokers: brokers, config: &ac, byTopic: map[string]*topicLimit{}}
}

// check returns a permanent refusal (wrapping sarama.ErrMessageSizeTooLarge)
// when km cannot fit topic's max.message.bytes, nil when it may fit or the
// limit is not known. The size it compares is a lower bound of the
// encoded batch, so no message the broker would take is refused.
func (l *topicLimits) check(km *sarama.ProducerMessage) error {
	limit := l.limit(km.Topic)
	if limit <= 0 {
		return nil
	}
	size := recordBatchOverhead
	if km.Key != nil {
		size += km.Key.Length()
	}
	if km.Value != nil {
		size += km.Value.Length()
	}
	for _, h := range km.Headers {
		size += len(h.Key) + len(h.Value)
	}
	if size <= limit {
		return nil
	}
	return classify(fmt.Errorf("record of at least %d bytes over topic %s's max.message.bytes (%d), not sent: %w", size, km.Topic, limit, sarama.ErrMessageSizeTooLarge))
}

// limit returns topic's max.message.bytes as last read, 0 if never, and
// starts reading it again when it is older than limitTTL.
func (l *topicLimits) limit(topic string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.byTopic[topic]
	if t == nil {
		t = &topicLimit{}
		l.byTopic[topic] = t
	}
	if !t.fetching && !l.closed && time.Since(t.read) >= limitTTL {
		t.fetching = true
		go l.fetch(topic, t)
	}
	return t.bytes
}

func (l *topicLimits) fetch(topic string, t *topicLimit) {
	n, err := l.describe(topic)
	l.mu.Lock()
	defer l.mu.Unlock()
	t.fetching, t.read = false, time.Now()
	if err == nil {
		t.bytes = n
	}
}

// describe reads topic's max.message.bytes from the cluster.
func (l *topicLimits) describe(topic string) (int, error) {
	l.mu.Lock()
	admin, closed := l.admin, l.closed
	l.mu.Unlock()
	if closed {
		return 0, errClosedLimits
	}
	if admin == nil {
		a, err := sarama.NewClusterAdmin(l.brokers, l.config)
		if err != nil {
			return 0, err
		}
		l.mu.Lock()
		if l.admin == nil && !l.closed {
			l.admin = a
		} else {
			_ = a.Close() // Close ran, or another look-up made one meanwhile
		}
		admin, closed = l.admin, l.closed
		l.mu.Unlock()
		if closed {
			return 0, errClosedLimits
		}
	}
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"max.message.bytes"}})
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if e.Name == "max.message.bytes" {
			return strconv.Atoi(e.Value)
		}
	}
	return 0, errors.New("no max.message.bytes in the topic's configuration")
}

var errClosedLimits = errors.New("kafkapub: publisher closed")

// close closes the admin connection; later look-ups do nothing.
func (l *topicLimits) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.admin == nil {
		return nil
	}
	err := l.admin.Close()
	l.admin = nil
	return err
}
