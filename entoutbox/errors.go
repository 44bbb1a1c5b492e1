package entoutbox

import (
	"errors"
	"fmt"

	"github.com/txoutbox/txoutbox"
)

// ErrNoTransaction is matched by the error of a mutation of an entity with
// the Mixin that does not run in a transaction, and by Emit and Execer given
// a client instead of a transaction. Nothing has been written: the check
// runs before any SQL. It is txoutbox.ErrNoTransaction.
var ErrNoTransaction = txoutbox.ErrNoTransaction

// errNoTransaction is ErrNoTransaction with what to do about it.
var errNoTransaction = fmt.Errorf("entoutbox: %w (use client.Tx or entoutbox.WithTx)", ErrNoTransaction)

// ErrNotGenerated is matched when the generated ent code lacks the methods
// entoutbox's entc extension adds: entoutboxext.New() is missing from the
// entc.Extensions of entc.go, or the code was not regenerated since.
var ErrNotGenerated = errors.New("entoutbox: generated code lacks entoutbox's methods; add entc.Extensions(entoutboxext.New()) to entc.go and run go generate")

// ErrConcurrentChange is matched by the error of an Update or Delete of many
// rows when a concurrent transaction changed or deleted some of the matched
// rows between the read of their IDs and the statement, so the statement
// touched fewer rows than there are events. The mutation has already run on
// the other rows: roll the transaction back (WithTx does) and retry.
var ErrConcurrentChange = errors.New("entoutbox: rows changed concurrently; roll back and retry")
