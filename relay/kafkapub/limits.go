package kafkapub

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/rcrowley/go-metrics"
)

// A record over its topic's max.message.bytes is refused here, before it
// is sent. Refused by the broker instead, it would make the idempotent
// producer bump its epoch, and the producer then sends the other
// partitions' unacknowledged batches again under the new epoch, where the
// broker cannot tell them from new ones: duplicates of healthy events,
// up to one in-flight window per refusal.

// limitTTL is how long a topic's max.message.bytes is trusted before it is
// read again (an operator may change it).
const limitTTL = time.Minute

// recordBatchOverhead is the size of a record batch's header (magic v2):
// the broker compares the batch, header included, with max.message.bytes.
const recordBatchOverhead = 61

// topicLimits knows each topic's max.message.bytes. A topic's first
// message starts reading it (DescribeConfigs) in the background and is
// sent unchecked; so is every message while the limit cannot be read (an
// outage, no DescribeConfigs permission on the topic) or is one broker's
// own setting, which the partition's leader may not share.
type topicLimits struct {
	brokers []string
	config  *sarama.Config

	// making lets one look-up at a time make the admin connection, and
	// madeFailed keeps the others from trying again for limitTTL after a
	// failure (an outage: each try costs the dial timeouts).
	making sync.Mutex

	mu         sync.Mutex
	admin      sarama.ClusterAdmin // made on first use
	madeFailed time.Time
	byTopic    map[string]*topicLimit
	closed     bool
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
	// NewClusterAdmin finds the controller with a metadata fetch, which
	// Metadata.Full = false skips; and an admin closing unregisters its
	// brokers' meters, which must not be the producer's.
	ac.Metadata.Full = true
	ac.MetricRegistry = metrics.NewRegistry()
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
	n, _ := l.describe(topic) // 0 on an error: a limit not known now is the broker's to apply
	l.mu.Lock()
	defer l.mu.Unlock()
	t.fetching, t.read, t.bytes = false, time.Now(), n
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
		var err error
		if admin, err = l.makeAdmin(); err != nil {
			return 0, err
		}
	}
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"max.message.bytes"}})
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if e.Name != "max.message.bytes" {
			continue
		}
		switch e.Source {
		case sarama.SourceTopic, sarama.SourceDynamicDefaultBroker, sarama.SourceDefault:
			return strconv.Atoi(e.Value)
		default:
			// The answering broker's own message.max.bytes (its
			// server.properties, or a per-broker setting): the leader of
			// the record's partition may have another, as in a rolling
			// restart that changes it.
			return 0, nil
		}
	}
	return 0, errors.New("no max.message.bytes in the topic's configuration")
}

// makeAdmin makes the admin connection, one look-up at a time, and not
// again within limitTTL of a failure.
func (l *topicLimits) makeAdmin() (sarama.ClusterAdmin, error) {
	l.making.Lock()
	defer l.making.Unlock()
	l.mu.Lock()
	admin, closed, failed := l.admin, l.closed, l.madeFailed
	l.mu.Unlock()
	switch {
	case closed:
		return nil, errClosedLimits
	case admin != nil:
		return admin, nil // made by the look-up before this one
	case time.Since(failed) < limitTTL:
		return nil, errors.New("kafkapub: no admin connection (it failed less than a minute ago)")
	}
	a, err := sarama.NewClusterAdmin(l.brokers, l.config)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.madeFailed = time.Now()
		return nil, err
	}
	if l.closed {
		_ = a.Close()
		return nil, errClosedLimits
	}
	l.admin = a
	return a, nil
}

var errClosedLimits = errors.New("kafkapub: publisher closed")

// close closes the admin connection; later look-ups do nothing.
func (l *topicLimits) close() error {
	l.mu.Lock()
	l.closed = true
	admin := l.admin
	l.admin = nil
	l.mu.Unlock()
	if admin == nil {
		return nil
	}
	return admin.Close() // outside mu: it waits for its metadata updater
}
