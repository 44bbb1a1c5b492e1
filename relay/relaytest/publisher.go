package relaytest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay"
)

// ErrRefused is the error a Failure returns when its Err is nil.
var ErrRefused = errors.New("relaytest: publish refused")

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("relaytest: publisher closed")

// Published is one message the publisher acknowledged, as the relay
// handed it over: Message.UUID is the event id, Message.Payload the
// payload, Message.Metadata the event's headers and the txoutbox.Header*
// keys. Hand Message to a consumer's handler to test it on what the relay
// would publish.
type Published struct {
	// Topic is the destination topic.
	Topic string
	// Key is the Kafka message key kafkapub would set: the aggregate id.
	Key string
	// Message is a copy of the message, without the relay's context.
	*message.Message
}

// EventType is the message's txoutbox.HeaderEventType.
func (p Published) EventType() string { return p.Metadata.Get(txoutbox.HeaderEventType) }

// Failure tells a Publisher to refuse messages. The zero value refuses
// every message, always, as an outage.
type Failure struct {
	// Topic, EventType and EventID, those set, must each be the message's
	// for it to be refused.
	Topic     string
	EventType string
	EventID   string

	// Times is how many matching publishes are refused; 0 is every one.
	Times int

	// Err is the error returned; nil is ErrRefused.
	Err error

	// Permanent marks the error with relay.Permanent: the event's own
	// fault, which makes it dead after the relay's MaxAttempts. Otherwise
	// the relay takes it for an outage and retries the event for as long
	// as it lasts.
	Permanent bool
}

// failure is a Failure with what is left of it.
type failure struct {
	Failure
	left int // publishes still to refuse; -1 for every one
}

func (f *failure) refuses(topic string, msg *message.Message) bool {
	if f.left == 0 ||
		f.Topic != "" && f.Topic != topic ||
		f.EventType != "" && f.EventType != msg.Metadata.Get(txoutbox.HeaderEventType) ||
		f.EventID != "" && f.EventID != msg.UUID {
		return false
	}
	if f.left > 0 {
		f.left--
	}
	return true
}

func (f *failure) err(topic string, msg *message.Message) error {
	err := f.Err
	if err == nil {
		err = ErrRefused
	}
	err = fmt.Errorf("%w (event %s to %s)", err, msg.UUID, topic)
	if f.Permanent {
		return relay.Permanent(err)
	}
	return err
}

// Publisher is a Watermill publisher that keeps what it is given instead
// of sending it anywhere, acknowledging at once, and refuses what it is
// told to (Fail). A test holds or slows its publishes, or watches them
// come, with OnPublish. It is a relay.BatchPublisher, like kafkapub's, so
// the relay hands it batches as it would Kafka. It is safe for concurrent
// use.
type Publisher struct {
	mu        sync.Mutex
	published []Published
	refused   []Published
	failures  []*failure
	hooks     []func(topic string, msg *message.Message)
	closed    bool
}

var _ relay.BatchPublisher = (*Publisher)(nil)

// NewPublisher returns a Publisher that acknowledges every message.
func NewPublisher() *Publisher { return &Publisher{} }

// Fail adds f: the messages it matches are refused, the first failure
// added that matches deciding the error, until Times of them were.
func (p *Publisher) Fail(f Failure) {
	p.mu.Lock()
	defer p.mu.Unlock()
	left := f.Times
	if left <= 0 {
		left = -1
	}
	p.failures = append(p.failures, &failure{Failure: f, left: left})
}

// Heal removes every Failure: from now on every message is acknowledged.
func (p *Publisher) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failures = nil
}

// OnPublish adds fn, which the publisher calls with every message of a
// Publish or PublishBatch call before it keeps or refuses any of them, as
// a broker answers a request whole. It runs on the caller's goroutine,
// without the publisher's lock, so a test can block in it to hold the
// call (a broker that has not answered: until a channel of the test's is
// closed, or msg.Context(), the relay's publish context, ends), or note
// what comes when. msg is the relay's own: fn must not change it. The
// functions added run in order, for the publisher's life.
func (p *Publisher) OnPublish(fn func(topic string, msg *message.Message)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hooks = append(p.hooks, fn)
}

// called runs the OnPublish functions for msg, without p.mu.
func (p *Publisher) called(topic string, msg *message.Message) {
	p.mu.Lock()
	hooks := p.hooks
	p.mu.Unlock()
	for _, fn := range hooks {
		fn(topic, msg)
	}
}

// Publish keeps msgs, or refuses the first a Failure matches, and those
// after it, with its error.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	for _, msg := range msgs {
		p.called(topic, msg)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, msg := range msgs {
		if err := p.publish(topic, msg); err != nil {
			for _, rest := range msgs[i+1:] {
				p.refused = append(p.refused, published(topic, rest))
			}
			return err
		}
	}
	return nil
}

// PublishBatch is Publish per message, with each one's outcome.
func (p *Publisher) PublishBatch(topics []string, msgs []*message.Message) []error {
	for i, msg := range msgs {
		p.called(topics[i], msg)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for i, msg := range msgs {
		if err := p.publish(topics[i], msg); err != nil {
			if errs == nil {
				errs = make([]error, len(msgs))
			}
			errs[i] = err
		}
	}
	return errs
}

// publish keeps or refuses one message; p.mu is held.
func (p *Publisher) publish(topic string, msg *message.Message) error {
	if p.closed {
		return ErrClosed
	}
	for _, f := range p.failures {
		if f.refuses(topic, msg) {
			p.refused = append(p.refused, published(topic, msg))
			return f.err(topic, msg)
		}
	}
	p.published = append(p.published, published(topic, msg))
	return nil
}

func published(topic string, msg *message.Message) Published {
	return Published{Topic: topic, Key: msg.Metadata.Get(txoutbox.HeaderAggregateID), Message: copyMessage(msg)}
}

// copyMessage copies msg's UUID, payload and metadata, without its
// context and acknowledgement.
func copyMessage(msg *message.Message) *message.Message {
	c := msg.Copy()
	c.Payload = bytes.Clone(msg.Payload)
	return c
}

// Close makes later publishes fail with ErrClosed. What was kept stays.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}

// Messages returns the messages acknowledged, in the order they were
// published. An event redelivered (after a failure recorded too late, or
// a relay's crash) appears as often as it was published, as consumers
// would see it.
func (p *Publisher) Messages() []Published {
	p.mu.Lock()
	defer p.mu.Unlock()
	return clone(p.published)
}

// Topic returns the messages acknowledged on topic, in order.
func (p *Publisher) Topic(topic string) []Published {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Published
	for _, m := range p.published {
		if m.Topic == topic {
			out = append(out, m)
		}
	}
	return clone(out)
}

// Refused returns the messages refused by a Failure, in order.
func (p *Publisher) Refused() []Published {
	p.mu.Lock()
	defer p.mu.Unlock()
	return clone(p.refused)
}

// Reset forgets the messages acknowledged and refused; Failures and
// OnPublish functions stay.
func (p *Publisher) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.published, p.refused = nil, nil
}

// clone copies ms and their messages, so a caller's changes to them stay
// its own.
func clone(ms []Published) []Published {
	out := make([]Published, len(ms))
	for i, m := range ms {
		out[i] = Published{Topic: m.Topic, Key: m.Key, Message: copyMessage(m.Message)}
	}
	return out
}
