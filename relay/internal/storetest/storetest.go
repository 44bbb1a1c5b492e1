// Package storetest has fake claim check stores for the relay's tests, in
// package relay and in its internal packages alike: a _test file cannot
// share them across packages.
package storetest

import (
	"context"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
)

// Checked is a claim check store that stores nothing (Offload returns the
// message as it is) and whose Check returns the error last set.
type Checked struct {
	mu  sync.Mutex
	err error
}

// NewChecked returns a Checked whose Check returns err until Set.
func NewChecked(err error) *Checked {
	return &Checked{err: err}
}

// Offload returns msg unchanged.
func (s *Checked) Offload(_ context.Context, _ txoutbox.Table, msg *message.Message) (*message.Message, error) {
	return msg, nil
}

// Check returns the error last set; nil, the store passes.
func (s *Checked) Check(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Set sets the error Check returns from now on.
func (s *Checked) Set(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// Unchecked is a claim check store without a Check method that stores
// nothing.
type Unchecked struct{}

// Offload returns msg unchanged.
func (Unchecked) Offload(_ context.Context, _ txoutbox.Table, msg *message.Message) (*message.Message, error) {
	return msg, nil
}
