package outboxtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// ReadTimeout bounds each read of the outbox: a test whose transaction
// waits on a lock fails with a clear error instead of hanging.
const ReadTimeout = 10 * time.Second

// Querier is where the assertions read the outbox: a value with either of
// the two query methods below. Anything else fails the test at once with a
// message saying what to pass. Go's type constraints cannot say "one of two
// method sets", and a pgx transaction cannot be made a database/sql one, so
// the type is checked when it is used.
//
// database/sql's QueryContext ([SQLQuerier]):
//   - *sql.DB, *sql.Conn: what committed;
//   - *sql.Tx: what the transaction holds, committed or not;
//   - GORM: tx.Statement.ConnPool inside db.Transaction (the *sql.Tx), or
//     the *sql.DB of db.DB() after the commit;
//   - ent: the *sql.DB the client was opened on (entsql.OpenDB) after the
//     commit, or the generated *ent.Tx itself when the code is generated
//     with ent's sql/execquery feature.
//
// pgx's Query ([PgxQuerier]): pgx.Tx, *pgxpool.Pool, *pgx.Conn.
//
// Wrap any of them with InTable for an outbox table other than "outbox"
// on the search_path.
type Querier any

// SQLQuerier is database/sql's query method: *sql.DB, *sql.Tx, *sql.Conn
// and GORM's ConnPool have it.
type SQLQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// PgxQuerier is pgx's query method: pgx.Tx, *pgxpool.Pool and *pgx.Conn
// have it.
type PgxQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// InTable returns q reading the outbox table t instead of "outbox" on the
// search_path. An invalid t fails the assertion that uses it.
func InTable(q Querier, t txoutbox.Table) Querier {
	return tableQuerier{q: q, table: t}
}

type tableQuerier struct {
	q     Querier
	table txoutbox.Table
}

// ErrNotQuerier is matched by the error of ReadEvents, and shown in the
// failure of an assertion, given a Querier with neither query method.
var ErrNotQuerier = errors.New("outboxtest: not a Querier")

// ReadEvents returns every event of the outbox in the order they were
// written, whatever their state, as q sees them: a transaction sees its
// own uncommitted events, a pool what committed. It is what the
// assertions read, for checks of your own.
func ReadEvents(ctx context.Context, q Querier) ([]Event, error) {
	table := txoutbox.Table{}
	if tq, ok := q.(tableQuerier); ok {
		q, table = tq.q, tq.table
	}
	names, err := outboxsql.NamesFor(table.Schema, table.Name)
	if err != nil {
		return nil, fmt.Errorf("outboxtest: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, ReadTimeout)
	defer cancel()
	query := names.Render(outboxsql.TestEvents)
	var r rows
	switch q := q.(type) {
	case SQLQuerier:
		sr, err := q.QueryContext(ctx, query)
		if err != nil {
			return nil, fmt.Errorf("outboxtest: read %s: %w", names.Table, err)
		}
		r = sqlRows{sr}
	case PgxQuerier:
		pr, err := q.Query(ctx, query)
		if err != nil {
			return nil, fmt.Errorf("outboxtest: read %s: %w", names.Table, err)
		}
		r = pgxRows{pr}
	default:
		return nil, fmt.Errorf("%w: %s", ErrNotQuerier, notQuerierHint(q))
	}
	events, err := scan(r)
	if err != nil {
		return nil, fmt.Errorf("outboxtest: read %s: %w", names.Table, err)
	}
	return events, nil
}

// notQuerierHint says what to pass instead of q.
func notQuerierHint(q any) string {
	switch fmt.Sprintf("%T", q) {
	case "*gorm.DB":
		return "a *gorm.DB has no QueryContext: pass tx.Statement.ConnPool inside db.Transaction, or the *sql.DB of db.DB()"
	case "<nil>":
		return "the Querier is nil"
	}
	return fmt.Sprintf("a %T has neither QueryContext (database/sql) nor Query (pgx): pass a *sql.Tx, *sql.DB, pgx.Tx or "+
		"*pgxpool.Pool (for ent, the *sql.DB the client was opened on, or an *ent.Tx generated with the sql/execquery feature)", q)
}

// rows is what scan needs of *sql.Rows and pgx.Rows.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

type sqlRows struct{ *sql.Rows }

type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error { r.Rows.Close(); return nil }

func scan(r rows) ([]Event, error) {
	defer r.Close()
	var events []Event
	for r.Next() {
		var (
			e       Event
			id      string
			headers string
		)
		if err := r.Scan(&e.Seq, &id, &e.Topic, &e.AggregateType, &e.AggregateID, &e.Type, &e.ContentType,
			&e.Payload, &headers, &e.CreatedAt, &e.State, &e.Attempts, &e.LastError); err != nil {
			return nil, err
		}
		if err := e.decode(id, headers); err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	return events, r.Close()
}
