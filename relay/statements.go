package relay

import "github.com/txoutbox/txoutbox/internal/outboxsql"

// statements are the relay's SQL, rendered once for its table.
type statements struct {
	claim, claimSettings, settleSettings, markUndecodable, shardsInHandover, walkSettings     string
	markPublished, fail, release                                                              string
	register, replacePredecessors, otherIncarnations, heartbeat, notifyRebalance, forgetStale string
	liveRelays, releaseShards, acquireShards, leaveShards, leaveRelay                         string
	prune, pruneLock, statsLag, statsBacklog, statsDead                                       string
	walGate, walSlots                                                                         string
	table, walSlot                                                                            string // walGate's and walSlots' arguments
}

// render renders the statements for the table of n; walSlot is the WAL
// relay's default slot name for it.
func render(n outboxsql.Names, walSlot string) *statements {
	return &statements{
		claim:               n.Render(outboxsql.Claim),
		claimSettings:       n.Render(outboxsql.ClaimSettings),
		settleSettings:      outboxsql.SettleSettings,
		markUndecodable:     n.Render(outboxsql.MarkUndecodable),
		shardsInHandover:    n.Render(outboxsql.ShardsInHandover),
		walkSettings:        outboxsql.WalkSettings,
		markPublished:       n.Render(outboxsql.MarkPublished),
		fail:                n.Render(outboxsql.Fail),
		release:             n.Render(outboxsql.Release),
		register:            n.Render(outboxsql.Register),
		replacePredecessors: n.Render(outboxsql.ReplacePredecessors),
		otherIncarnations:   n.Render(outboxsql.OtherIncarnations),
		heartbeat:           n.Render(outboxsql.Heartbeat),
		notifyRebalance:     n.Render(outboxsql.NotifyRebalance),
		forgetStale:         n.Render(outboxsql.ForgetStaleRelays),
		liveRelays:          n.Render(outboxsql.LiveRelays),
		releaseShards:       n.Render(outboxsql.ReleaseShards),
		acquireShards:       n.Render(outboxsql.AcquireShards),
		leaveShards:         n.Render(outboxsql.LeaveShards),
		leaveRelay:          n.Render(outboxsql.LeaveRelay),
		prune:               n.Render(outboxsql.Prune),
		pruneLock:           n.Render(outboxsql.PruneLock),
		statsLag:            n.Render(outboxsql.StatsLag),
		statsBacklog:        n.Render(outboxsql.StatsBacklogScheduled),
		statsDead:           n.Render(outboxsql.StatsDead),
		walGate:             outboxsql.OpsWALGate,
		walSlots:            outboxsql.RelayWALSlots,
		table:               n.Table,
		walSlot:             walSlot,
	}
}
