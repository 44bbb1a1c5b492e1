package inbox

import (
	"github.com/txoutbox/txoutbox"
)

// Pgx adapts a pgx transaction (pgx.Tx) for Claim and Process; it is
// txoutbox.Pgx. Pass the transaction, not a pool, so an inbox record
// cannot commit on its own by mistake.
func Pgx[T txoutbox.CommandTag](tx txoutbox.PgxExecer[T]) txoutbox.SQLExecer { return txoutbox.Pgx(tx) }
