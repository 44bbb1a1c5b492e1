package txoutbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// Dialect is the database an outbox lives in, which decides the SQL the
// writer, the inbox and the migrator send. The zero value means "not
// said": the Writer and the inbox then take PostgreSQL, and
// migrations.Migrator, which has a *sql.DB, detects it (DialectOf).
//
// On MySQL the write side (Writer, gormoutbox, entoutbox, inbox,
// outboxtest, the migrator) and relay.New work; see docs/mysql.md for
// what does not yet.
type Dialect uint8

const (
	// PostgreSQL 14 and later.
	PostgreSQL Dialect = Dialect(outboxsql.PostgreSQL)
	// MySQL 8.0 and later, and MariaDB 10.6 and later.
	MySQL Dialect = Dialect(outboxsql.MySQL)
)

// String returns "postgres", "mysql", or "unset" for the zero value.
func (d Dialect) String() string { return outboxsql.Dialect(d).String() }

// ErrUnknownDriver is matched by the error of DialectOf for a database/sql
// driver it does not know: say the Dialect explicitly.
var ErrUnknownDriver = outboxsql.ErrUnknownDriver

// ErrInvalidDialect is matched by the errors of the constructors given a
// Dialect that is none of the constants.
var ErrInvalidDialect = errors.New("txoutbox: invalid dialect")

// DialectOf returns the dialect of db (a *sql.DB) from its driver's type:
// pgx's stdlib driver and lib/pq are PostgreSQL, go-sql-driver/mysql is
// MySQL. Any other driver, such as a tracing wrapper, is an error matching
// ErrUnknownDriver that names its type.
func DialectOf(db interface{ Driver() driver.Driver }) (Dialect, error) {
	if v := reflect.ValueOf(db); db == nil || v.Kind() == reflect.Pointer && v.IsNil() {
		return 0, errors.New("txoutbox: DialectOf: the database is nil")
	}
	d, err := outboxsql.DialectOfDriver(db.Driver())
	return Dialect(d), err
}

// DetectDialect is DialectOf, and for a driver DialectOf does not know
// (a tracing wrapper, say) a probe: one SELECT version() on db, which
// tells PostgreSQL's answer from MySQL's and MariaDB's.
func DetectDialect(ctx context.Context, db *sql.DB) (Dialect, error) {
	d, err := DialectOf(db)
	if err == nil || !errors.Is(err, ErrUnknownDriver) {
		return d, err
	}
	var v string
	if perr := db.QueryRowContext(ctx, outboxsql.DialectProbe).Scan(&v); perr != nil {
		return 0, fmt.Errorf("%w; probing the server failed too: %w", err, perr)
	}
	return Dialect(outboxsql.DialectOfVersion(v)), nil
}

// internal returns d for internal/outboxsql, or ErrInvalidDialect.
func (d Dialect) internal() (outboxsql.Dialect, error) {
	if !outboxsql.Dialect(d).Valid() {
		return 0, fmt.Errorf("%w: %d", ErrInvalidDialect, uint8(d))
	}
	return outboxsql.Dialect(d), nil
}
