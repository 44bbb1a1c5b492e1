package relaytest

import "github.com/ThreeDotsLabs/watermill/message"

// nopPublisher acknowledges every message without sending it anywhere.
type nopPublisher struct{}

func (nopPublisher) Publish(string, ...*message.Message) error { return nil }
func (nopPublisher) Close() error                              { return nil }
