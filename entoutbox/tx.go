package entoutbox

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"entgo.io/ent/dialect"

	"github.com/txoutbox/txoutbox"
)

// Tx is what entoutbox needs of an ent transaction. The generated *ent.Tx
// has it once entoutboxext.New() is in entc.go; so do the generated client
// (which is not a transaction, and is refused) and every mutation.
type Tx interface {
	// EntoutboxDriver returns the driver and whether it is a transaction.
	EntoutboxDriver() (drv dialect.Driver, inTx bool)
}

// Execer returns tx as a txoutbox.SQLExecer for a txoutbox.Writer of your
// own, e.g. one with another table. It returns an error matching
// ErrNoTransaction if tx is not a transaction, for example the client.
func Execer(tx Tx) (txoutbox.SQLExecer, error) {
	drv, inTx := tx.EntoutboxDriver()
	if !inTx {
		return nil, errNoTransaction
	}
	if d := drv.Dialect(); d != dialect.Postgres {
		return nil, fmt.Errorf("entoutbox: the outbox needs PostgreSQL, the ent driver's dialect is %q", d)
	}
	return driverExecer{drv}, nil
}

// driverExecer runs statements through the ent driver rather than the
// underlying *sql.Tx, so they go wherever ent's own statements go, through
// any driver wrapper (debug logging, tracing) the application installed.
type driverExecer struct{ drv dialect.ExecQuerier }

func (e driverExecer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	if err := e.drv.Exec(ctx, query, args, &res); err != nil {
		return nil, err
	}
	return res, nil
}

var defaultWriter = sync.OnceValues(func() (*txoutbox.Writer, error) {
	return txoutbox.NewWriter(txoutbox.WriterConfig{})
})

// Emit writes events to the default outbox table ("outbox" on the
// connection's search_path) in tx, the application's *ent.Tx, in one round
// trip. They commit or roll back with tx.
//
// It returns an error matching ErrNoTransaction, before any SQL, if tx is
// not a transaction, and one matching txoutbox.ErrInvalidEvent, writing
// nothing, if an event is invalid. After a database error PostgreSQL has
// aborted the transaction: roll it back. For another table, build a
// txoutbox.Writer and pass it Execer(tx).
func Emit(ctx context.Context, tx Tx, events ...txoutbox.Event) error {
	ex, err := Execer(tx)
	if err != nil {
		return err
	}
	w, err := defaultWriter()
	if err != nil {
		return err
	}
	return w.Write(ctx, ex, events...)
}
