package relay

import (
	"log/slog"
	"slices"
	"sync"
	"time"
)

// outageThreshold is how many publish calls in a row must fail for an
// outage (IsPermanent false), with none acknowledged or refused, before the
// relay reports an outage and the claimer backs off between claims. A
// lone event failing stays below it.
const outageThreshold = 3

// outage follows the publish calls' outcomes across lanes: an outage is a
// run of calls that failed with no acknowledgement nor refusal in between,
// which shows the broker (or the way to it) is away rather than refusing
// events. The lanes count their calls; the claimer backs off while a run
// lasts, and the outage gauge reads how long it has.
type outage struct {
	clock *clock
	log   *slog.Logger

	mu     sync.Mutex
	failed int           // calls failed in a row
	since  time.Duration // on the relay's clock: the first of them
	logged bool          // the outage was reported
}

// count records the outcome of one publish call (errs as the lane got it:
// nil when all were acknowledged). A call failed whole by an outage counts
// once; any acknowledgement or permanent refusal shows the broker is up and
// ends the run. Calls cut short by shutdown count for nothing.
func (o *outage) count(errs []error, stopping bool) {
	up := errs == nil || slices.ContainsFunc(errs, func(err error) bool { return err == nil || IsPermanent(err) })
	if !up && stopping {
		return
	}
	now := o.clock.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if up {
		if o.logged {
			o.log.Info("relay: publishing again after an outage", "lasted", (now - o.since).Round(time.Millisecond))
		}
		o.failed, o.logged = 0, false
		return
	}
	if o.failed == 0 {
		o.since = now
	}
	o.failed++
	if o.failed >= outageThreshold && !o.logged {
		o.logged = true
		o.log.Warn("relay: publishes fail for an outage (the broker or the way to it is away); retrying until it is back, no event goes dead for it",
			"err", firstErr(errs))
	}
}

// run returns how many publish calls in a row failed for an outage.
func (o *outage) run() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failed
}

// lasted returns how long the current outage has lasted, zero when there
// is none (fewer than outageThreshold calls failed in a row).
func (o *outage) lasted() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failed < outageThreshold {
		return 0
	}
	return o.clock.now() - o.since
}

// reset starts a Run with no outage.
func (o *outage) reset() {
	o.mu.Lock()
	o.failed, o.logged = 0, false
	o.mu.Unlock()
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
