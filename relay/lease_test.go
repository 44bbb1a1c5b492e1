package relay

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// Rows that wait in a lane past their lease (behind a publish slower than
// the lease) are given back, not published: the relay itself, or a peer,
// claims them again once the lease ends, and publishing the held copy too
// was a second delivery with no failure recorded (the residual duplicates
// of the crash suite's poison scenario on the real cluster). Only the
// event whose own publish outlived the lease goes out twice, as
// LeaseDuration documents; every aggregate stays in order.
func TestRowsPastTheirLeaseAreGivenBackNotPublished(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.write(t, 6, "k")
	var once sync.Once
	pub := newOutagePublisher(func(string) error {
		once.Do(func() { time.Sleep(1500 * time.Millisecond) }) // about time: the first publish outlives the lease
		return nil
	})
	cfg := fastConfig(b)
	cfg.LeaseDuration = time.Second
	cfg.Lanes, cfg.LaneBatch = 1, 1 // the other rows wait behind the slow one
	cfg.PublishTimeout = 10 * time.Second
	r := b.newRelayWith(t, pub, cfg)
	stop := start(t, r)
	b.waitPublished(t, 20*time.Second, 6)
	stop()
	pub.checkOrder(t, 6, "k")
	pub.mu.Lock()
	defer pub.mu.Unlock()
	seen := map[int]int{}
	for _, seq := range pub.acked["k"] {
		seen[seq]++
	}
	var errs []error
	for seq := 1; seq < 6; seq++ {
		if seen[seq] != 1 {
			errs = append(errs, errors.New("an event that waited past its lease was published more than once"))
			t.Logf("event %d published %d times (deliveries %v)", seq, seen[seq], pub.acked["k"])
		}
	}
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
}
