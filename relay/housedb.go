package relay

import (
	"context"
	"database/sql"
	"time"
)

// The housekeeping loops' databases: one interface per loop (the pruner,
// the stats sampler, the repairer and the claim floor rounds), each
// operation in a transaction, or on a connection, of its own, as the
// loop ran it before. An implementation holds all of one database's SQL
// for them (pgHouseDB: PostgreSQL); the loops' logic (when to run, what
// to log and count, how to pace) is written once above them. An operation
// a database has no use for answers that there is nothing to do: no
// partitions, no rows to repair, an idle floor proof.

// pruneDB is the pruner's database.
type pruneDB interface {
	// pruneState reads what a prune round starts from. A database with
	// no partitioned outboxes answers the zero pruneState: the rows are
	// pruned from the table.
	pruneState(ctx context.Context) (pruneState, error)
	// maintainPartitions creates the partitions ahead of p.maxID and
	// drops those past p.retention below p.floor, unless another relay is
	// at it (then it returns locked false and nothing else), holding a
	// lock on a session of its own meanwhile. Only a failure to list the
	// partitions or to take the lock is its error; a failure to create or
	// drop one is reported in the round, which goes on.
	maintainPartitions(ctx context.Context, p partitionParams) (partitionRound, error)
	// pruneBatch deletes up to p.batch published rows older than
	// p.retention, from p.partition (empty: the table), in one durable
	// transaction, and returns how many it deleted. locked false: another
	// relay prunes (a database without a prune lock always answers true),
	// and nothing was deleted.
	pruneBatch(ctx context.Context, p pruneParams) (deleted int64, locked bool, err error)
}

// pruneState is what a prune round starts from (partitions.State).
type pruneState struct {
	partitioned bool  // the table is partitioned
	owner       bool  // the role may create and drop its partitions
	maxID       int64 // the highest id written, or handed out to a writer when owner
	floor       int64 // the claim floor
}

// partitionParams are a partition maintenance round's parameters.
type partitionParams struct {
	maxID     int64         // pruneState.maxID: the partitions ahead start above it
	floor     int64         // pruneState.floor: only partitions below it may go
	retention time.Duration // Config.Retention
}

// partitionRound is what a partition maintenance round did.
type partitionRound struct {
	locked bool // false: another relay maintains them; the rest is unset
	// top is where the partitions ahead ended before the round: rows at
	// or above it went to the default partition.
	top       int64
	created   []string // the partitions created
	createErr error    // why more were not: the next round tries again
	dropped   []string // the partitions dropped whole
	// kept are the partitions to prune row by row: those kept by dead
	// rows, a partition whose drop failed (left whole to the next round)
	// and the default one.
	kept    []string
	dropErr error // why a partition was not dropped
}

// pruneParams are a prune batch's parameters.
type pruneParams struct {
	partition string        // a partition's quoted name (partitionRound.kept); empty: the table
	retention time.Duration // Config.Retention
	batch     int           // Config.PruneBatch
}

// statsDB is the stats sampler's database.
type statsDB interface {
	// statsConn holds a connection for one reading, so that the reading's
	// statement is timed apart from the wait for the connection.
	statsConn(ctx context.Context) (statsConn, error)
}

// statsConn runs stats readings on the connection it holds, each counting
// rows one by one up to a cap (txoutbox.StatsExactMax) at most.
type statsConn interface {
	// lag reads the lags (see outboxsql.StatsLags).
	lag(ctx context.Context, limit int) (statsLag, error)
	// backlog counts the unpublished rows and the scheduled ones among
	// them (see outboxsql.StatsBacklogScheduled).
	backlog(ctx context.Context, limit int) (unpublished, scheduled int64, err error)
	// dead counts the dead rows (see outboxsql.StatsDead).
	dead(ctx context.Context, limit int) (int64, error)
	// close gives the connection back.
	close()
}

// statsLag is a lag reading.
type statsLag struct {
	oldest sql.NullTime // when the oldest due unpublished row became due; invalid: none
	due    sql.NullTime // the same of those not held behind a scheduled row; invalid: none
	now    time.Time    // the database clock
}

// repairDB is the repairer's database.
type repairDB interface {
	// repair repairs the rows no relay wrote in the window of a claim of
	// p.window rows from p.shards (outboxsql.RepairRetryAt), and returns
	// them in id order. A database whose writers cannot leave such rows
	// returns none.
	repair(ctx context.Context, p repairParams) ([]repairedRow, error)
}

// repairParams are a repair's parameters.
type repairParams struct {
	window int     // Config.BatchSize: the rows a claim reads of each kind
	shards []int16 // the shards the claims read
}

// floorDB is the claim floor rounds' database: the floor's proofs
// (outboxsql.ClaimFloorStart, ClaimFloorPassed, ClaimFloorRaise) and the
// claims' Low on a partitioned outbox (outboxsql.ClaimLow).
type floorDB interface {
	// floorStart starts a proof. A database without floor proofs returns
	// an idle one.
	floorStart(ctx context.Context) (floorProof, error)
	// floorPassed reports whether every transaction p waits for ended.
	floorPassed(ctx context.Context, p floorProof) (bool, error)
	// floorRaise raises the floor as p proved, if the floor's generation
	// is still p's, and returns the floor; raised is false when it did
	// not.
	floorRaise(ctx context.Context, p floorProof) (floor int64, raised bool, err error)
	// floorRead reads the floor.
	floorRead(ctx context.Context) (int64, error)
	// claimRanges lists the outbox's range partitions with an upper
	// bound, in id order; none for one table.
	claimRanges(ctx context.Context) ([]idRange, error)
	// firstUnpublished returns the lowest id that may be unpublished in
	// partitions, each wholly below the floor (where only retries may be
	// unpublished); ok is false when none is.
	firstUnpublished(ctx context.Context, partitions []idRange) (id int64, ok bool, err error)
}

// floorProof is a claim floor proof started: what the rounds read of it,
// and what the database needs to check and raise it, opaque above it
// (PostgreSQL's: the outboxsql.ClaimFloorProof).
type floorProof struct {
	gen  int64 // the floor's generation; negative: the table has no floor (schema version 8)
	idle bool  // no row at or above the floor: the raise could move nothing
	db   any
}

// idRange is a range partition: its quoted, qualified name and the ids
// it holds, from (0 when it has no lower bound) up to, not including, to.
type idRange struct {
	name     string
	from, to int64
}
