package relay

import (
	"context"
	"time"
)

// memberDB is the relay's database for its membership: its incarnations'
// rows in the relays table, the shards they own, and the check that no
// WAL relay streams the table. An implementation holds all of one
// database's SQL for them (pgMemberDB: PostgreSQL); the membership's logic
// (incarnations, settled rounds, the shards' assignment, handover, standing
// by) is written once above it.
//
// Each operation is one transaction of its own, bounded on the server by
// the relay's timeouts (Config.StatementTimeout and LockTimeout). While the
// table is locked out (see lockout), every operation but register fails
// with errLockedOut without running; register, which commits durably,
// heeds none.
type memberDB interface {
	// register records a new incarnation and deletes the other
	// incarnations of its name (an earlier run of a relay restarted under
	// the same Config.ID), so their shards and claims are taken over now,
	// in one transaction that commits durably; it returns the ids of those
	// it deleted. On an error the registration may have committed (its
	// reply lost).
	register(ctx context.Context, p registration) (replaced []string, err error)
	// heartbeat refreshes a live incarnation's row, deletes the relays
	// whose heartbeat is older than p.staleAfter (skipping rows another
	// transaction holds locked), counts the shards the incarnation owns
	// and lists the live relays, in that order and in one transaction, so
	// the list leaves the forgotten out.
	//
	// dead is set when the heartbeat found no row for the incarnation:
	// peers declared it dead, or it was replaced. It is conclusive even
	// when the transaction then failed (an incarnation's row never comes
	// back); on an error nothing else is.
	heartbeat(ctx context.Context, p heartbeatParams) (heartbeat, error)
	// liveRelays deletes the relays whose heartbeat is older than
	// staleAfter, as heartbeat does, and lists the live relays, in one
	// transaction: the round of an incarnation just registered.
	liveRelays(ctx context.Context, staleAfter time.Duration) (forgotten, live []string, err error)
	// moveShards gives up p.owner's shards not in p.shards and takes those
	// of p.shards that are free or owned by an incarnation that is gone,
	// in one transaction. It returns how many shards it gave up and the
	// shards p.owner owns afterwards, in order.
	moveShards(ctx context.Context, p shardsParams) (released int64, owned []int16, err error)
	// shardsInHandover returns, in order, which of p.shards still hold
	// rows claimed by another live incarnation under a valid lease among
	// the rows a claim of p.owner would read first (at most p.window of
	// them): the shards whose previous owner has rows in flight.
	shardsInHandover(ctx context.Context, p handoverParams) ([]int16, error)
	// otherIncarnations counts the live incarnations of p.name
	// (heartbeats younger than p.staleAfter) other than those in p.own.
	otherIncarnations(ctx context.Context, p othersParams) (int, error)
	// leaveShards releases every shard of incarnation owner, so peers take
	// them over at once.
	leaveShards(ctx context.Context, owner string) error
	// leaveRelay deletes incarnation owner's row.
	leaveRelay(ctx context.Context, owner string) error
	// walSlot returns the name of a WAL relay's slot (package walrelay)
	// that streams the table, "" for none; a database without WAL relays
	// always answers "". It looks holding the WAL gate shared, which a WAL
	// relay holds exclusively while it checks for polling relays'
	// heartbeats and makes its slot, so of a polling and a WAL relay
	// starting together one sees the other.
	walSlot(ctx context.Context) (string, error)
}

// rebalanceNotifier is the part of a memberDB, optional, that tells the
// table's other relays at once that the membership changed, so they
// rebalance now rather than at their next heartbeat. A database that
// cannot notify leaves it out.
type rebalanceNotifier interface {
	// notifyRebalance announces a change, outside any transaction. It is
	// an optimisation: its error is only worth a debug line.
	notifyRebalance(ctx context.Context) error
}

// registration is a new incarnation to record.
type registration struct {
	owner string // the incarnation's token
	name  string // Config.ID
	host  string // the machine's host name
}

// heartbeatParams are a heartbeat's parameters.
type heartbeatParams struct {
	owner      string        // the incarnation
	staleAfter time.Duration // Config.StaleAfter: older heartbeats are forgotten
}

// heartbeat is what a heartbeat found.
type heartbeat struct {
	dead      bool     // no row for the incarnation: see memberDB.heartbeat
	forgotten []string // the ids of the relays it deleted as stale
	held      int      // the shards the incarnation owns
	live      []string // the live relays' names (their id where none)
}

// shardsParams are a shard move's parameters.
type shardsParams struct {
	owner  string  // the incarnation
	shards []int16 // the shards it should own
}

// handoverParams are a handover check's parameters.
type handoverParams struct {
	owner  string  // the incarnation
	shards []int16 // the shards to check
	window int     // how many rows a claim reads first: Config.BatchSize
}

// othersParams are an otherIncarnations' parameters.
type othersParams struct {
	name       string        // Config.ID
	own        []string      // this relay's incarnations, ended or unconfirmed
	staleAfter time.Duration // Config.StaleAfter
}
