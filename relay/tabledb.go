package relay

import (
	"context"
	"errors"
)

// tableDB is the relay's database for its table as a whole, outside the
// rounds of its loops: whether another session's lock is in the table's
// way (the lockout's probe, and which errors say a statement gave up on
// such a lock), the table's schema version, and the role's grants. An
// implementation holds all of one database's SQL and error codes for them
// (pgTableDB: PostgreSQL); the lockout's episodes, Run's and a Group's
// schema checks and CheckGrants are written once above it.
type tableDB interface {
	// probe reports whether the relay's statements would find no lock in
	// their way now, waiting for none, in one transaction it rolls back
	// (a probe changes nothing), bounded by Config.StatementTimeout: nil
	// when they would not, an error for which lockWait is true while
	// another session holds (or waits for) a lock on the table or its
	// companions that the relay's writes conflict with, errGateHeld while
	// the claim gate or the WAL gate is held, and any other error when the
	// probe could not tell.
	probe(ctx context.Context) error
	// lockWait reports whether err is the database's: a statement gave up
	// on a lock another session holds, after Config.LockTimeout or without
	// waiting (NOWAIT). A statement that ran out of its time limit
	// (Config.StatementTimeout) is not one.
	lockWait(err error) bool
	// checkSchema reads which schema versions the table has, changing
	// nothing, bounded by Config.StatementTimeout: an error matching
	// migrations.ErrSchemaTooOld when a version the implementation's
	// statements need is not applied (or the table does not exist), one
	// matching migrations.ErrSchemaTooNew when a version the relay's
	// release does not know is, another error when it could not read
	// them, nil otherwise (see migrations.Migrator.Check). Each database
	// has its own migrations, so the version needed is the
	// implementation's.
	checkSchema(ctx context.Context) error
	// checkGrants returns an error naming the first privilege the role
	// lacks on the outbox tables, with the GRANT that gives it, or nil (see
	// Relay.CheckGrants for what a relay needs).
	checkGrants(ctx context.Context) error
}

// errGateHeld: the probe found the claim gate or the WAL gate held.
var errGateHeld = errors.New("the claim gate or the WAL gate is held")
