package kafkapub

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/txoutbox/txoutbox/relay"
)

// A record that cannot fit its topic's max.message.bytes is refused before
// it is sent, as a permanent refusal carrying the broker's reason; one that
// may fit, or whose topic's limit is not known, is left to the broker.
func TestRecordOverTheTopicsLimitIsRefusedBeforeItIsSent(t *testing.T) {
	t.Parallel()
	l := newTopicLimits(nil, sarama.NewConfig())
	t.Cleanup(func() { _ = l.close() })
	l.byTopic["small"] = &topicLimit{bytes: 200, read: time.Now()}
	msg := func(topic string, value int) *sarama.ProducerMessage {
		return &sarama.ProducerMessage{
			Topic:   topic,
			Key:     sarama.StringEncoder("order-1"),
			Value:   sarama.ByteEncoder(make([]byte, value)),
			Headers: []sarama.RecordHeader{{Key: []byte("event_id"), Value: []byte("01a2347f-f3d6-729f-90ee-8a5eff8af285")}},
		}
	}
	err := l.check(msg("small", 200))
	if !errors.Is(err, sarama.ErrMessageSizeTooLarge) || !relay.IsPermanent(err) {
		t.Fatalf("a 200-byte value on a topic of 200 bytes: %v, want a permanent ErrMessageSizeTooLarge", err)
	}
	if !strings.Contains(err.Error(), sarama.ErrMessageSizeTooLarge.Error()) || !strings.Contains(err.Error(), "(200)") {
		t.Errorf("error %q does not name the broker's reason and the limit", err)
	}
	// 61 + 7 + 8 + 36 + 80 = 192: may fit.
	if err := l.check(msg("small", 80)); err != nil {
		t.Errorf("a record that may fit: %v", err)
	}
	// No limit known yet (its look-up fails here: no brokers): sent.
	if err := l.check(msg("unknown", 1<<20)); err != nil {
		t.Errorf("a topic whose limit is not known: %v", err)
	}
}

// A limit that can no longer be read is dropped, not kept: the topic's
// operator may have raised it meanwhile, and a stale limit would refuse
// records the broker now takes. A failed admin connection is not tried
// again for every topic within limitTTL.
func TestLimitNotReadAgainIsLeftToTheBroker(t *testing.T) {
	t.Parallel()
	l := newTopicLimits([]string{"127.0.0.1:1"}, sarama.NewConfig()) // nothing listens
	t.Cleanup(func() { _ = l.close() })
	stale := &topicLimit{bytes: 100, read: time.Now().Add(-2 * limitTTL)}
	l.byTopic["raised"] = stale
	l.fetch("raised", stale)
	if stale.bytes != 0 {
		t.Fatalf("after a failed look-up the limit is %d, want 0 (not known)", stale.bytes)
	}
	if l.madeFailed.IsZero() {
		t.Fatal("the failed admin connection is not remembered")
	}
	start := time.Now()
	if _, err := l.makeAdmin(); err == nil || time.Since(start) > time.Second {
		t.Fatalf("a second admin connection within limitTTL of a failure: err %v after %s, want an error at once", err, time.Since(start))
	}
}
