package outboxsql

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
)

// MySQLExec runs stmt with args inlined (MySQLInline): as text, in one
// round trip, without the server-side prepare, execute and close the
// driver makes of a statement with arguments.
func MySQLExec(ctx context.Context, e interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, stmt string, args []any) (sql.Result, error) {
	text, err := MySQLInline(stmt, args)
	if err != nil {
		return nil, err
	}
	return e.ExecContext(ctx, text)
}

// MySQLQuery is MySQLExec for a statement that returns rows.
func MySQLQuery(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, stmt string, args []any) (*sql.Rows, error) {
	text, err := MySQLInline(stmt, args)
	if err != nil {
		return nil, err
	}
	return q.QueryContext(ctx, text)
}

// MySQLServerOnce remembers which server a pool reaches (MySQLServerOf of
// DialectProbe), read on the first connection that asks. Its zero value
// is ready.
type MySQLServerOnce struct {
	server atomic.Uint32
	known  atomic.Bool
}

// Of returns the server, reading its version on q the first time.
func (o *MySQLServerOnce) Of(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (MySQLServer, error) {
	if o.known.Load() {
		return MySQLServer(o.server.Load()), nil
	}
	var v string
	if err := q.QueryRowContext(ctx, DialectProbe).Scan(&v); err != nil {
		return 0, fmt.Errorf("read the server's version: %w", err)
	}
	s := MySQLServerOf(v)
	o.server.Store(uint32(s))
	o.known.Store(true)
	return s, nil
}
