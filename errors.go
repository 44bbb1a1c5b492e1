package txoutbox

import "errors"

// ErrNoTransaction is matched by every error txoutbox's packages return for
// a write that would not run inside a transaction: an outbox row or inbox
// record that commits on its own would announce a change that may roll
// back, or mark an event processed whose effect failed. gormoutbox's and
// entoutbox's ErrNoTransaction and inbox's ErrNotInTransaction are this
// error. Nothing has been written when it is returned.
var ErrNoTransaction = errors.New("txoutbox: not in a transaction")
