package txoutbox

import "errors"

// ErrNoTransaction is matched by every error txoutbox's packages return for
// a write that would not run inside a transaction: an outbox row or inbox
// record that commits on its own would announce a change that may roll
// back, or mark an event processed whose effect failed. gormoutbox's and
// entoutbox's ErrNoTransaction and inbox's ErrNotInTransaction are this
// error. Nothing has been written when it is returned.
var ErrNoTransaction = errors.New("txoutbox: not in a transaction")

// ErrNoWALSlot is returned by a Writer with WALMessages when nothing would
// decode its events: wal_level is not logical, or no WAL relay's slot
// streams the outbox table (start the WAL relay once, which makes it).
// Nothing has been written; the transaction stays usable.
var ErrNoWALSlot = errors.New("txoutbox: no WAL relay slot streams the outbox table (or wal_level is not logical): table-less events would be lost")

// ErrNotBeforeStreamed is returned for an event with a NotBefore in the
// future, more than MaxNotBeforeSkew ahead, that would be published early:
// by a Writer with WALMessages (judged by the writer's clock; nothing
// written, the transaction stays usable), or by the database for a table
// the WAL relay streams (judged by the statement's clock: relay/walrelay
// publishes every event at commit, and the outbox schema's trigger refuses
// such rows while a WAL relay's slot streams the table; the transaction is
// then aborted, as by any database error). A NotBefore already past is
// never refused. Delayed events need the polling relay.
var ErrNotBeforeStreamed = errors.New("txoutbox: the outbox is streamed by the WAL relay, which publishes at commit: an event with a future NotBefore would go out early")
