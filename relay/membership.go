package relay

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// numShards is fixed by the schema: shard = hashtext(aggregate_id) & 255.
const numShards = outboxsql.Shards

// convergeInterval is how soon the relay rebalances again while it does not
// yet claim from every shard it should own: a peer has not released them yet,
// or their previous owner still has events in flight.
const convergeInterval = 200 * time.Millisecond

// membership is the relay's place among its peers: its incarnation and its
// heartbeat, and which shards it claims from. It alone writes the relays and
// shards tables, through its memberDB.
//
// Shards spread the work: each is owned by one live incarnation, chosen by
// rendezvous hashing of the relays' names, so a relay restarted under the
// same Config.ID gets the same shards back. Order does not rest on them:
// outboxsql.Claim keeps it even while two relays' shard lists overlap (a
// stale list, a handover in progress).
type membership struct {
	db memberDB
	// notifier announces membership changes to the peers; nil where the
	// database cannot (they rebalance at their next heartbeat).
	notifier rebalanceNotifier
	table    string // the table's quoted name, for ErrWALStreams' message
	cfg      *Config
	log      *slog.Logger
	clock    *clock
	host     string

	// wake asks the claimer to claim now (new shards to claim from).
	wake chan struct{}
	// stalled reports whether the relay cannot make progress (see
	// stall.stalled); nil: never.
	stalled func() bool
	// lockout says whether the table is locked out: no round runs until
	// it is not.
	lockout *lockout
	// rebalanceNow is signalled when a peer announces a membership change
	// (NOTIFY with outboxsql.RebalancePayload).
	rebalanceNow chan struct{}

	cur atomic.Pointer[incarnation]
	// own lists this relay's incarnations whose registration may have
	// committed unseen; only the membership loop touches it.
	own []string
	// settled is the incarnation and the live relays' names of the last
	// round after which the relay claimed from every shard it should own;
	// a round that finds both unchanged, and the incarnation still owning
	// as many shards, leaves the shards table alone. A failed round
	// clears it. Only the membership loop touches it.
	settled struct {
		token string
		names []string
	}

	mu     sync.Mutex
	shards []int16        // owned shards out of handover, claimed from; guarded by mu
	ready  map[int16]bool // the same as a set; guarded by mu
	owned  atomic.Int64   // len(shards), for metrics
}

// newMembership returns the membership of the relay of cfg on db, whose
// notifications of changes it sends when db is a rebalanceNotifier too;
// table is the table's quoted name.
func newMembership(db memberDB, table string, cfg *Config, log *slog.Logger, c *clock, wake chan struct{}) *membership {
	host, _ := os.Hostname()
	notifier, _ := db.(rebalanceNotifier)
	return &membership{db: db, notifier: notifier, table: table, cfg: cfg, log: log, clock: c, host: host, wake: wake,
		rebalanceNow: make(chan struct{}, 1)}
}

// claimable returns the incarnation to claim under and the shards to claim
// from, or nil when the relay must not claim: it is not registered yet, or
// its incarnation ended and the next heartbeat round has not replaced it.
func (m *membership) claimable() (*incarnation, []int16) {
	inc := m.cur.Load()
	if inc == nil || !inc.live(m.clock.now()) {
		return nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return inc, m.shards
}

func (m *membership) setShards(shards []int16) {
	m.mu.Lock()
	m.shards = shards
	m.ready = make(map[int16]bool, len(shards))
	for _, s := range shards {
		m.ready[s] = true
	}
	m.mu.Unlock()
	if prev := m.owned.Swap(int64(len(shards))); prev != int64(len(shards)) && len(shards) > 0 {
		signal(m.wake)
	}
}

// run heartbeats, declares relays with stale heartbeats dead, and moves
// shards so each is owned by exactly one live relay. Besides every
// HeartbeatInterval, it rebalances when a peer announces a change and, until
// converged, every convergeInterval, so relays that join or leave take
// effect in a fraction of a heartbeat.
func (m *membership) run(ctx context.Context) {
	var t *spreadTicker // from the end of the first round, which runs at once
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	converge := time.NewTimer(time.Hour)
	defer converge.Stop()
	failures := 0
	for {
		// Nothing runs on a locked-out table: the round comes once the
		// lock is gone, and registers anew if the incarnation ended
		// meanwhile.
		if !m.lockout.wait(ctx) {
			return
		}
		converged, err := m.round(ctx)
		switch {
		case err == nil:
			failures = 0
		case ctx.Err() != nil:
			return
		case m.lockout.hit(ctx, err):
			// Said by the lockout, once for the episode.
		case errors.Is(err, errStandingBy):
			failures++
			m.log.Error("relay: "+err.Error(), "id", m.cfg.ID)
		case errors.Is(err, ErrWALStreams):
			failures++
			m.log.Error(err.Error()+"; claiming nothing", "id", m.cfg.ID)
		default:
			failures++
			m.log.Warn("relay: heartbeat failed", "err", err, "failures", failures)
		}
		if err == nil && !converged {
			converge.Reset(convergeInterval)
		}
		if t == nil {
			t = newSpreadTicker(m.cfg.HeartbeatInterval)
		}
		select {
		case <-t.C:
			t.ticked()
		case <-converge.C:
		case <-m.rebalanceNow:
		case <-ctx.Done():
			return
		}
	}
}

// round runs one heartbeat round. It reports whether the relay claims from
// every shard it should own. After an error the relay claims from no shard
// until a round succeeds: its view of the fleet is unknown.
func (m *membership) round(ctx context.Context) (converged bool, err error) {
	defer func() {
		if err != nil {
			m.setShards(nil)
			m.settled.token, m.settled.names = "", nil
		}
	}()
	if m.stalled != nil && m.stalled() {
		if m.cur.Load() != nil {
			m.log.Error("relay: a publish outlived PublishTimeout and nothing was acknowledged since; giving up this relay's shards and claims until the publisher answers")
			m.giveUp()
		}
		return true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.StatementTimeout)
	defer cancel()
	inc, names, held, err := m.beat(ctx, m.clock.now())
	if err != nil {
		return false, err
	}
	if err := m.refuseWhileWALStreams(ctx); err != nil {
		return false, err
	}
	mine := assignShards(m.cfg.ID, names)
	if inc.token == m.settled.token && slices.Equal(names, m.settled.names) && held == len(mine) {
		// Nothing changed since a round after which the relay claimed
		// from every shard it should own, and it still owns them all:
		// none to give up, none to take.
		return true, nil
	}
	// The shards given up and those taken, in one transaction.
	released, owned, err := m.db.moveShards(ctx, shardsParams{owner: inc.token, shards: mine})
	if err != nil {
		return false, fmt.Errorf("release and acquire shards: %w", err)
	}
	if released > 0 {
		m.announce(ctx) // the shards' new owners can take them now
	}
	ready := m.outOfHandover(ctx, inc, owned)
	if len(ready) != int(m.owned.Load()) {
		m.log.Info("relay: shards rebalanced", "owned", len(owned), "claiming_from", len(ready), "live_relays", len(names))
	}
	m.setShards(ready)
	if len(ready) == len(mine) {
		m.settled.token, m.settled.names = inc.token, names
	}
	return len(ready) == len(mine), nil
}

// beat is the round's heartbeat, with the stale relays forgotten, the
// live ones listed and the shards the incarnation owns counted: for a
// live incarnation, all in one transaction, so the list leaves the
// forgotten out; otherwise, and when peers declared the incarnation dead,
// after renew registers a new one (held is then -1: not counted).
func (m *membership) beat(ctx context.Context, start time.Duration) (inc *incarnation, names []string, held int, err error) {
	if cur := m.cur.Load(); cur != nil && cur.live(start) {
		hb, err := m.db.heartbeat(ctx, heartbeatParams{owner: cur.token, staleAfter: m.cfg.StaleAfter})
		if hb.dead {
			// Conclusive even if the transaction then failed: an
			// incarnation's row never comes back.
			m.log.Warn("relay: peers declared this relay dead (its heartbeat went stale); dropping the events it holds and registering anew",
				"incarnation", cur.token)
			cur.end()
		}
		if err != nil {
			return nil, nil, 0, fmt.Errorf("heartbeat, forget stale relays and list the live ones: %w", err)
		}
		m.sayForgotten(hb.forgotten) // committed, even with a heartbeat that found none
		if !hb.dead {
			// Extended from start, the moment before the statement was
			// sent, which is no later than the heartbeat_at recorded.
			cur.extend(start + m.cfg.StaleAfter - m.cfg.HeartbeatInterval)
			return cur, hb.live, hb.held, nil
		}
	}
	if inc, err = m.renew(ctx, start); err != nil {
		return nil, nil, 0, err
	}
	forgotten, names, err := m.db.liveRelays(ctx, m.cfg.StaleAfter)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("forget stale relays and list the live ones: %w", err)
	}
	m.sayForgotten(forgotten)
	return inc, names, -1, nil
}

// sayForgotten logs the relays a committed round declared dead.
func (m *membership) sayForgotten(ids []string) {
	for _, id := range ids {
		m.log.Warn("relay: declared a relay dead after its heartbeat went stale; taking over its work", "dead_relay", id)
	}
}

// renew registers a new incarnation when there is none yet or the
// current one ended: declared dead by peers (its row is gone), or its
// deadline passed (it dropped what it held).
func (m *membership) renew(ctx context.Context, start time.Duration) (*incarnation, error) {
	if inc := m.cur.Load(); inc != nil {
		// Rows it published but had not marked yet are claimed and
		// published again: this line is what explains those duplicates
		// (a heartbeat stalled past the deadline, not a crash). Said once
		// per incarnation.
		if inc.expired.Load() && inc.told.CompareAndSwap(false, true) {
			m.log.Warn("relay: no heartbeat succeeded within StaleAfter less one HeartbeatInterval; dropping the events it holds and registering anew (their marks not yet committed are published again)",
				"incarnation", inc.token, "stale_after", m.cfg.StaleAfter)
		}
		m.setShards(nil)
		if err := m.standBy(ctx, inc); err != nil {
			return nil, err
		}
	}
	next := newIncarnation(m.cfg.ID)
	next.extend(start + m.cfg.StaleAfter - m.cfg.HeartbeatInterval)
	if err := m.register(ctx, next); err != nil {
		return nil, err
	}
	m.cur.Store(next)
	return next, nil
}

// refuseWhileWALStreams fails with ErrWALStreams while a WAL relay's slot
// streams the table: both modes would publish every event, the slot would
// hold WAL for ever, and a WAL relay started again would replay all since.
// It runs after the heartbeat, holding the WAL gate shared: a WAL relay
// checks for polling relays' heartbeats and makes its slot holding the
// gate exclusively (see walrelay), so of a polling and a WAL relay
// starting together one sees the other. The gate is held only while a WAL
// relay sets its slot up, and a round that waits out its timeout on it
// claims nothing; one that waits LockTimeout on it is locked out.
func (m *membership) refuseWhileWALStreams(ctx context.Context) error {
	slots, err := m.db.walSlot(ctx)
	if err != nil {
		return fmt.Errorf("look for WAL relay slots: %w", err)
	}
	if slots != "" {
		return fmt.Errorf("%w: slot %s streams %s: hand the outbox over with `outbox wal takeover` (stop the WAL relays first), "+
			"or stop these polling relays", ErrWALStreams, slots, m.table)
	}
	return nil
}

// checkMode is refuseWhileWALStreams at start, within StatementTimeout:
// only ErrWALStreams fails it (a database out of reach is the rounds' to
// wait for).
func (m *membership) checkMode(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.StatementTimeout)
	defer cancel()
	err := m.refuseWhileWALStreams(ctx)
	if errors.Is(err, ErrWALStreams) {
		return err
	}
	if err != nil && ctx.Err() == nil && !m.lockout.hit(ctx, err) {
		m.log.Warn("relay: could not look for WAL relay slots at start; the heartbeat rounds look again", "err", err)
	}
	return nil
}

// errStandingBy is returned by a round while another live incarnation of
// this relay's id is registered.
var errStandingBy = errors.New("another relay is registered under this relay's id; standing by until it is gone (relay ids must be unique among running relays)")

// standBy fails with errStandingBy while a live incarnation of the relay's
// id other than its own is registered: the one that replaced it. Replacing
// it back would make two relays under one id evict each other at every
// heartbeat; the newer one wins, and this one registers anew (replacing it)
// once it is gone: stopped, or its heartbeat older than StaleAfter.
func (m *membership) standBy(ctx context.Context, ended *incarnation) error {
	n, err := m.db.otherIncarnations(ctx, othersParams{name: m.cfg.ID, own: append(m.own, ended.token), staleAfter: m.cfg.StaleAfter})
	if err != nil {
		return fmt.Errorf("look for other incarnations: %w", err)
	}
	if n > 0 {
		return errStandingBy
	}
	return nil
}

// register records a new incarnation, replaces earlier incarnations of the
// same name (a restart under a fixed Config.ID) so their work is taken over
// now, and announces the change.
func (m *membership) register(ctx context.Context, inc *incarnation) error {
	replaced, err := m.db.register(ctx, registration{owner: inc.token, name: m.cfg.ID, host: m.host})
	if err != nil {
		// It may have committed without the reply arriving: never stand
		// by behind it.
		m.own = append(m.own, inc.token)
		return fmt.Errorf("register: %w", err)
	}
	m.own = m.own[:0]
	for _, old := range replaced {
		m.log.Warn("relay: replaced an earlier incarnation of this relay id; taking over its work (relay ids must be unique among running relays)",
			"replaced", old)
	}
	m.log.Info("relay: registered", "incarnation", inc.token)
	m.announce(ctx)
	return nil
}

// announce asks the peers to rebalance now. It is an optimisation: peers
// that miss it rebalance at their next heartbeat.
func (m *membership) announce(ctx context.Context) {
	if m.notifier == nil {
		return
	}
	if err := m.notifier.notifyRebalance(ctx); err != nil {
		m.log.Debug("relay: announce rebalance", "err", err)
	}
}

// outOfHandover returns the owned shards the relay may claim from: those it
// has claimed from before, and newly acquired ones whose previous owner has
// no claimed rows in flight any more where a claim would look first (see
// outboxsql.ShardsInHandover). Shards still in handover are checked again
// at the next round, and so are all new ones when the check fails: the
// shards already out of handover stay claimable, since Claim keeps order
// on its own.
func (m *membership) outOfHandover(ctx context.Context, inc *incarnation, owned []int16) []int16 {
	m.mu.Lock()
	var fresh []int16
	for _, s := range owned {
		if !m.ready[s] {
			fresh = append(fresh, s)
		}
	}
	m.mu.Unlock()
	if len(fresh) == 0 {
		return owned
	}
	busy, err := m.db.shardsInHandover(ctx, handoverParams{owner: inc.token, shards: fresh, window: m.cfg.BatchSize})
	if err != nil {
		m.log.Warn("relay: check shard handover; claiming only from the shards out of handover before", "err", err, "new_shards", len(fresh))
		busy = fresh
	}
	return slices.DeleteFunc(owned, func(s int16) bool { return slices.Contains(busy, s) })
}

// giveUp ends the incarnation and leaves: its rows are its peers' to
// claim at once, and nothing it holds is published any more. The next
// round after the relay can make progress again registers anew.
func (m *membership) giveUp() {
	if inc := m.cur.Load(); inc != nil {
		inc.end()
	}
	m.leave()
}

// leave gives up the incarnation's shards and heartbeat so peers take over
// now rather than after StaleAfter.
func (m *membership) leave() {
	inc := m.cur.Load()
	if inc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.StatementTimeout)
	defer cancel()
	if err := m.db.leaveShards(ctx, inc.token); err != nil {
		m.log.Warn("relay: release shards on shutdown", "err", err)
	}
	if err := m.db.leaveRelay(ctx, inc.token); err != nil {
		m.log.Warn("relay: unregister on shutdown", "err", err)
	}
	m.announce(ctx)
	m.setShards(nil)
	m.cur.Store(nil)
}

// assignShards returns the shards relay me should own among the live relays,
// by rendezvous hashing: each shard goes to the relay with the highest
// hash(shard, relay). Every relay computes the same assignment from the same
// list, and a relay joining or leaving moves only the shards it gains or
// loses.
func assignShards(me string, live []string) []int16 {
	var mine []int16
	for shard := range numShards {
		best, bestScore := "", uint64(0)
		for _, id := range live {
			h := fnv.New64a()
			h.Write([]byte(strconv.Itoa(shard)))
			h.Write([]byte{0})
			h.Write([]byte(id))
			if s := h.Sum64(); best == "" || s > bestScore || (s == bestScore && id < best) {
				best, bestScore = id, s
			}
		}
		if best == me {
			mine = append(mine, int16(shard))
		}
	}
	return mine
}
