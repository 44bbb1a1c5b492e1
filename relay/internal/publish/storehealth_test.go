package publish

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay/internal/storetest"
)

// StoreHealth follows the store: unchecked before its first check, then
// each check's error, and nil again once the store passes.
func TestStoreHealthFollowsTheStore(t *testing.T) {
	t.Parallel()
	away := errors.New("store s3://payloads: connection refused")
	store := storetest.NewChecked(away)
	h := NewStoreHealth(store)
	h.interval = 10 * time.Millisecond
	if !errors.Is(h.Err(), errUnchecked) {
		t.Fatalf("Err before a check = %v, want errUnchecked", h.Err())
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { h.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	testkit.WaitFor(t, 5*time.Second, "the store's error", func() bool { return errors.Is(h.Err(), away) })
	store.Set(nil)
	testkit.WaitFor(t, 5*time.Second, "the store to pass", func() bool { return h.Err() == nil })

	var none *StoreHealth // a store without Check, or none
	if NewStoreHealth(nil) != nil || none.Err() != nil {
		t.Error("no store: want a nil StoreHealth whose Err is nil")
	}
	none.Run(ctx) // returns at once
}
