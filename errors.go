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
