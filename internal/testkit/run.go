package testkit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// Run calls run (a relay's Run, say) in a goroutine of its own until stop
// is called or the test ends. stop cancels run's context, waits up to 30
// seconds for it to return and returns its error; called again, it
// returns the same. The test's end stops it too, and fails the test on an
// error.
func Run(t testing.TB, run func(context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = errors.New("Run did not return within 30s of cancel")
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return stop
}
