package publish

import (
	"context"
	"errors"
	"sync"
	"time"
)

// StoreChecker is what a claim check's store has when it can tell whether
// it works (claimcheck.Store's Check): nil when it answers and takes
// uploads, else an error naming it (the relay reports it as it is).
type StoreChecker interface {
	Check(ctx context.Context) error
}

// StoreCheckInterval is how often a relay checks its claim check's store
// (one request to it each time, a HEAD of the bucket for S3): often
// enough for a readiness probe, rarely enough to cost nothing.
const StoreCheckInterval = 10 * time.Second

// errUnchecked is the store's state before its first check: readiness
// waits for an answer.
var errUnchecked = errors.New("claim check: the payload store is not checked yet")

// StoreHealth keeps the result of the last check of a claim check's
// store, for the relay's Health: Health reads memory only, so the checks
// run on their own loop (Run).
type StoreHealth struct {
	store    StoreChecker
	interval time.Duration

	mu  sync.Mutex
	err error
}

// NewStoreHealth returns the health of large, or nil when large is nil or
// cannot be checked. Err and Run work on a nil StoreHealth.
func NewStoreHealth(large LargePayloads) *StoreHealth {
	c, ok := large.(StoreChecker)
	if !ok {
		return nil
	}
	return &StoreHealth{store: c, interval: StoreCheckInterval, err: errUnchecked}
}

// Err is the last check's error, nil while it passes or with no store to
// check.
func (h *StoreHealth) Err() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Run checks the store at once and every interval until ctx ends; each
// check is bounded by the interval.
func (h *StoreHealth) Run(ctx context.Context) {
	if h == nil {
		return
	}
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, h.interval)
		err := h.store.Check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		h.mu.Lock()
		h.err = err
		h.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
