package relay

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"strings"
	"time"
)

// numShards is fixed by the schema: shard = hashtext(aggregate_id) & 255.
const numShards = 256

// convergeInterval is how soon the relay rebalances again while it does not
// yet claim from every shard it should own: a peer has not released them yet,
// or their previous owner still has events in flight.
const convergeInterval = 200 * time.Millisecond

// membershipLoop heartbeats, declares relays with stale heartbeats dead, and
// moves shards so each is owned by exactly one live relay. Besides every
// HeartbeatInterval, it rebalances when a peer announces a change (NOTIFY
// with RebalancePayload) and, until converged, every convergeInterval, so
// relays that join or leave take effect in a fraction of a heartbeat.
func (r *Relay) membershipLoop(ctx context.Context) {
	host, _ := os.Hostname()
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	converge := time.NewTimer(time.Hour)
	defer converge.Stop()
	failures := 0
	for {
		converged, err := r.rebalance(ctx, host)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			r.log.Warn("relay: heartbeat failed", "err", err, "failures", failures)
		} else {
			failures = 0
		}
		if err == nil && !converged {
			converge.Reset(convergeInterval)
		}
		select {
		case <-t.C:
		case <-converge.C:
		case <-r.rebalanceNow:
		case <-ctx.Done():
			return
		}
	}
}

// rebalance runs one heartbeat round. It holds shardMu throughout, so no
// claim runs between re-registering (after peers declared this relay dead)
// and learning which shards it still owns.
//
// It reports whether the relay claims from every shard it should own.
func (r *Relay) rebalance(ctx context.Context, host string) (converged bool, err error) {
	r.shardMu.Lock()
	defer r.shardMu.Unlock()
	var joined bool
	if err := r.db.QueryRowContext(ctx, r.sql.heartbeat, r.cfg.ID, host).Scan(&joined); err != nil {
		return false, fmt.Errorf("heartbeat: %w", err)
	}
	if joined {
		r.announce(ctx)
	}
	forgotten, err := r.queryStrings(ctx, r.sql.forgetStale, intervalLiteral(r.cfg.StaleAfter))
	if err != nil {
		return false, fmt.Errorf("forget stale relays: %w", err)
	}
	for _, id := range forgotten {
		r.log.Warn("relay: declared a relay dead after its heartbeat went stale; taking over its work", "dead_relay", id)
	}
	live, err := r.queryStrings(ctx, r.sql.liveRelays)
	if err != nil {
		return false, fmt.Errorf("list relays: %w", err)
	}
	mine := assignShards(r.cfg.ID, live)
	want := shardArray(mine)

	res, err := r.db.ExecContext(ctx, r.sql.releaseShards, r.cfg.ID, want)
	if err != nil {
		return false, fmt.Errorf("release shards: %w", err)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		r.announce(ctx) // the shards' new owners can take them now
	}
	owned, err := r.queryStrings(ctx, r.sql.acquireShards, r.cfg.ID, want)
	if err != nil {
		r.ownedShards = "{}" // unknown: claim nothing until the next round
		return false, fmt.Errorf("acquire shards: %w", err)
	}
	ready, err := r.takeOver(ctx, owned)
	if err != nil {
		r.ownedShards = "{}"
		return false, err
	}
	r.ownedShards = "{" + strings.Join(ready, ",") + "}"
	if prev := r.owned.Swap(int64(len(ready))); prev != int64(len(ready)) {
		r.log.Info("relay: shards rebalanced", "owned", len(owned), "claiming_from", len(ready), "live_relays", len(live))
		signal(r.wake)
	}
	return len(ready) == len(mine), nil
}

// announce asks the peers to rebalance now. It is an optimisation: peers
// that miss it rebalance at their next heartbeat.
func (r *Relay) announce(ctx context.Context) {
	if _, err := r.db.ExecContext(ctx, r.sql.notifyRebalance); err != nil {
		r.log.Debug("relay: announce rebalance", "err", err)
	}
}

// takeOver returns the owned shards the relay may claim from: those it has
// claimed from before, and newly acquired ones whose previous owner has no
// claimed rows in flight any more (see outboxsql.ShardsInHandover). Shards
// still in handover are checked again at the next heartbeat.
func (r *Relay) takeOver(ctx context.Context, owned []string) ([]string, error) {
	var fresh []string
	for _, s := range owned {
		if !r.ready[s] {
			fresh = append(fresh, s)
		}
	}
	var busy map[string]bool
	if len(fresh) > 0 {
		inHandover, err := r.queryStrings(ctx, r.sql.shardsInHandover, r.cfg.ID, "{"+strings.Join(fresh, ",")+"}")
		if err != nil {
			return nil, fmt.Errorf("check shard handover: %w", err)
		}
		busy = make(map[string]bool, len(inHandover))
		for _, s := range inHandover {
			busy[s] = true
		}
	}
	ready := make(map[string]bool, len(owned))
	out := make([]string, 0, len(owned))
	for _, s := range owned {
		if !busy[s] {
			ready[s] = true
			out = append(out, s)
		}
	}
	r.ready = ready
	return out, nil
}

// assignShards returns the shards relay me should own among the live relays,
// by rendezvous hashing: each shard goes to the relay with the highest
// hash(shard, relay). Every relay computes the same assignment from the same
// list, and a relay joining or leaving moves only the shards it gains or
// loses.
func assignShards(me string, live []string) []int {
	var mine []int
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
			mine = append(mine, shard)
		}
	}
	return mine
}

func shardArray(shards []int) string {
	s := make([]string, len(shards))
	for i, n := range shards {
		s[i] = strconv.Itoa(n)
	}
	return "{" + strings.Join(s, ",") + "}"
}

func (r *Relay) queryStrings(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := r.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
