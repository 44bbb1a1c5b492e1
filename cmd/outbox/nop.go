package main

import "github.com/ThreeDotsLabs/watermill/message"

// nopPublisher lets a command validate a relay.Config through relay.New
// before it connects to a broker. It is never published to.
type nopPublisher struct{}

func (nopPublisher) Publish(string, ...*message.Message) error { return nil }
func (nopPublisher) Close() error                              { return nil }
