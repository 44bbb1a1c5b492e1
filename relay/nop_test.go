package relay

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// nopPublisher acknowledges every message without sending it anywhere.
type nopPublisher struct{}

func (nopPublisher) Publish(string, ...*message.Message) error { return nil }
func (nopPublisher) Close() error                              { return nil }

// slowPublisher acknowledges every message after a delay, as a broker
// does after a round trip.
type slowPublisher time.Duration

func (p slowPublisher) Publish(string, ...*message.Message) error {
	time.Sleep(time.Duration(p)) // about time: the round trip
	return nil
}
func (slowPublisher) Close() error { return nil }
