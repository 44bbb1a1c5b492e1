package relay

import (
	"time"

	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// Health is a relay's view of itself, for liveness and readiness probes.
type Health struct {
	// Running is true from Run's start until it returns: its loops run.
	Running bool

	// Incarnation is the current incarnation ("<id>#<random>"), empty
	// before the first successful registration.
	Incarnation string

	// Heartbeating is true while the incarnation's heartbeats keep it
	// alive: the relay may publish what it claims. It turns false when the
	// relay cannot reach the database for about StaleAfter, or its peers
	// declared it dead, until a new incarnation registers.
	Heartbeating bool

	// SinceHeartbeat is the time since the last successful heartbeat
	// started, or zero before the first.
	SinceHeartbeat time.Duration

	// Stalled is true while the relay cannot make progress: a publish
	// outlived Config.PublishTimeout and has not returned, and nothing was
	// acknowledged since. The relay has given up its shards and claims
	// (Heartbeating is false) and joins again once the publish returns.
	Stalled bool

	// Shards is how many shards the relay claims from. Zero while it waits
	// for shards a peer still hands over, or when more relays run than
	// there are shards.
	Shards int

	// Locked is true while the table is locked out: a statement on it
	// gave up on a lock another session holds (Config.LockTimeout), and
	// the relay runs nothing on it but a probe until the lock is gone.
	// Its heartbeats stop with the rest: past StaleAfter, Heartbeating
	// turns false too, and it registers anew once the lock is gone.
	// LockedFor is how long it has been locked out.
	Locked    bool
	LockedFor time.Duration

	// LargePayloads is the state of the claim check's store
	// (Config.LargePayloads.Store) when it has a method
	// Check(ctx context.Context) error, as claimcheck.Store has: the
	// error of its last check, which names the store, or nil while it
	// passes. The relay checks it when Run starts and every
	// LargePayloadsCheckInterval (a Group once for all its tables);
	// before the first answer it is an error too. Nil without a claim
	// check or with a store that has no Check. While it is set, events
	// over the threshold wait: a readiness probe fails on it, as outbox
	// relay's /readyz does.
	LargePayloads error
}

// LargePayloadsCheckInterval is how often a relay checks its claim
// check's store for Health.LargePayloads: one request to the store each
// time (for S3, a HEAD of the bucket).
const LargePayloadsCheckInterval = publish.StoreCheckInterval

// Health reports the relay's state from memory, without a query. A relay
// that is Running and Heartbeating works, whether it owns shards or waits
// for them; whether the database answers right now is for the caller to
// check.
func (r *Relay) Health() Health {
	h := Health{Running: r.running.Load(), Shards: int(r.members.owned.Load()), Stalled: r.stall.stalled(), LargePayloads: r.store.Err()}
	h.Locked, h.LockedFor = r.lockout.state()
	inc := r.members.cur.Load()
	if inc == nil {
		return h
	}
	now := r.clock.now()
	h.Incarnation = inc.token
	h.Heartbeating = inc.live(now)
	// A successful heartbeat that started at s extends the deadline to
	// s + StaleAfter - HeartbeatInterval.
	last := time.Duration(inc.deadline.Load()) - (r.cfg.StaleAfter - r.cfg.HeartbeatInterval)
	h.SinceHeartbeat = max(now-last, 0)
	return h
}
