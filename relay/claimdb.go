package relay

import (
	"context"
	"time"
)

// claimDB is the relay's database for one table's claim cycle: the
// operations the claimer and the completer run, each in a transaction of
// its own bounded on the server by the relay's timeouts. An implementation
// holds all of one database's SQL for the cycle (pgClaimDB: PostgreSQL);
// the claimer's and completer's logic is written once above it.
//
// A claimed row's version (claimVersion) is opaque above it: claim
// produces it, and the settling operations take it back with the row's
// owner, so that a late outcome leaves alone a row settled or claimed
// again since.
type claimDB interface {
	// claim takes up to p.limit due rows for p.owner under a lease of
	// p.lease, and returns them in id order with id, event, attempts,
	// version and bytes set. A row that cannot become a message is made
	// dead in the claim's transaction and returned in undecodable
	// instead, so that one bad row does not fail every claim.
	//
	// On an error it returns no rows, except when the commit's outcome is
	// unknown (its reply was lost): then rows are those the claim took if
	// it committed, which the caller must release before it claims again.
	claim(ctx context.Context, p claimParams) (rows []*claimedRow, undecodable []undecodableRow, err error)
	// mark records rows as published, in one transaction that need not
	// commit durably: a lost mark only publishes its rows again.
	mark(ctx context.Context, rows []claimRef) error
	// settle records s in one transaction that commits durably, since
	// failures and releases take rows out of the relay's memory. It
	// returns the outcome of each failure recorded; a failure of a row
	// its owner no longer holds is not recorded.
	settle(ctx context.Context, s settlement) ([]failOutcome, error)
	// release returns rows to pending, due at once, their attempts
	// unchanged, in one transaction that commits durably, and returns how
	// many it released: the rows of a claim whose commit's outcome was
	// unknown.
	release(ctx context.Context, rows []claimRef) (int64, error)
}

// dueProber is the part of a claimDB, optional, that tells in one cheap
// statement whether a claim could take anything: on a database without
// LISTEN/NOTIFY the relay polls often, and a poll that finds nothing then
// costs that statement instead of a claim's transaction. It may answer
// true when a claim would take nothing (rows held under a live lease),
// never false when one would take something.
type dueProber interface {
	anyDue(ctx context.Context) (bool, error)
}

// claimParams are a claim's parameters.
type claimParams struct {
	owner  string        // the claiming incarnation (its token)
	limit  int           // the most rows to claim
	bytes  int64         // the most payload bytes to claim (at least one row is)
	lease  time.Duration // how long the claim holds them (Config.LeaseDuration)
	shards []int16       // the shards to claim from
	// low is the lowest id to read on a partitioned outbox, which the
	// claim floor rounds keep (outboxsql.ClaimLow); 0 reads every id.
	low int64
}

// claimVersion fences a claimed row's settlement: the value its claim
// wrote with it, which a mark (and, where the database needs it, a
// failure or a release) must find unchanged. The claimDB that claimed the
// row made it and alone reads it; the rows of one claim share it, and it
// is comparable. PostgreSQL's is the claim's transaction, the rows' xmin
// (a uint32).
type claimVersion any

// claimRef names a claimed row to settle: its id, the incarnation that
// claimed it and its claim's version.
type claimRef struct {
	id      int64
	owner   string
	version claimVersion
}

// refOf is the reference that settles row.
func refOf(row *claimedRow) claimRef {
	return claimRef{id: row.id, owner: row.inc.token, version: row.version}
}

// refsOf is refOf of each of rows.
func refsOf(rows []*claimedRow) []claimRef {
	out := make([]claimRef, len(rows))
	for i, row := range rows {
		out[i] = refOf(row)
	}
	return out
}

// settlement is what the completer records in one durable transaction:
// failures, then releases, then marks.
type settlement struct {
	fails []rowFailure
	// maxAttempts is Config.MaxAttempts: a permanent failure that reaches
	// it makes its row dead.
	maxAttempts int
	releases    []claimRef
	marks       []claimRef
}

// rowFailure is one failed publish to record.
type rowFailure struct {
	claimRef
	err       string        // storable (storableText)
	permanent bool          // the event's own fault (IsPermanent): it may go dead
	delay     time.Duration // until the row is due again
}

// failOutcome is a failure recorded: its row is dead, or pending again
// (retried after its delay).
type failOutcome struct {
	id   int64
	dead bool
}

// undecodableRow is a claimed row that cannot become a message, and why.
type undecodableRow struct {
	id  int64
	err string
}
