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
	ex, _, err := execer(tx)
	return ex, err
}

// execer is Execer with the dialect of tx's driver.
func execer(tx Tx) (txoutbox.SQLExecer, txoutbox.Dialect, error) {
	drv, inTx := tx.EntoutboxDriver()
	if !inTx {
		return nil, 0, errNoTransaction
	}
	var d txoutbox.Dialect
	switch name := drv.Dialect(); name {
	case dialect.Postgres:
		d = txoutbox.PostgreSQL
	case dialect.MySQL:
		d = txoutbox.MySQL
	default:
		return nil, 0, fmt.Errorf("entoutbox: the outbox needs PostgreSQL, MySQL or MariaDB, the ent driver's dialect is %q", name)
	}
	return driverExecer{drv}, d, nil
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

var defaultWriters = sync.OnceValue(func() map[txoutbox.Dialect]writerOrErr {
	return writersFor(txoutbox.WriterConfig{})
})

// writerOrErr is the Writer of one dialect, or why the configuration has
// none (WALMessages on MySQL, say).
type writerOrErr struct {
	w   *txoutbox.Writer
	err error
}

// writersFor builds cfg's Writer for each dialect (only Dialect's, if it
// names one): an ent client's dialect is known at each write only.
func writersFor(cfg txoutbox.WriterConfig) map[txoutbox.Dialect]writerOrErr {
	out := map[txoutbox.Dialect]writerOrErr{}
	for _, d := range []txoutbox.Dialect{txoutbox.PostgreSQL, txoutbox.MySQL} {
		if cfg.Dialect != 0 && cfg.Dialect != d {
			out[d] = writerOrErr{err: fmt.Errorf("entoutbox: the Writer's Dialect is %s, and the ent driver's is %s", cfg.Dialect, d)}
			continue
		}
		wc := cfg
		wc.Dialect = d
		w, err := txoutbox.NewWriter(wc)
		if err != nil {
			err = fmt.Errorf("entoutbox: on %s: %w", d, err)
		}
		out[d] = writerOrErr{w, err}
	}
	return out
}

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
	ex, d, err := execer(tx)
	if err != nil {
		return err
	}
	we := defaultWriters()[d]
	if we.err != nil {
		return we.err
	}
	return we.w.Write(ctx, ex, events...)
}
