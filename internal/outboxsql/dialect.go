package outboxsql

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// Dialect is the SQL dialect of the database an outbox lives in. Each has
// its own statements: PostgreSQL's are the rest of this package, MySQL's
// are in mysql.go.
type Dialect uint8

const (
	// Unset is the zero value: the caller did not say. Components with a
	// *sql.DB detect the dialect (DialectOfDriver); the others take
	// PostgreSQL.
	Unset Dialect = iota
	// PostgreSQL: version 14 and later.
	PostgreSQL
	// MySQL: MySQL 8.0 and later, and MariaDB 10.6 and later, through
	// the SQL both accept.
	MySQL
)

// String names the dialect as the CLI's and errors' text does.
func (d Dialect) String() string {
	switch d {
	case Unset:
		return "unset"
	case PostgreSQL:
		return "postgres"
	case MySQL:
		return "mysql"
	}
	return fmt.Sprintf("Dialect(%d)", uint8(d))
}

// Valid reports whether d is Unset or one of the dialects.
func (d Dialect) Valid() bool { return d <= MySQL }

// ErrUnknownDriver is matched by the error of DialectOfDriver for a
// database/sql driver it does not know.
var ErrUnknownDriver = errors.New("txoutbox: unknown database/sql driver")

// driverPackages maps the package of a database/sql driver's type to its
// dialect. A driver is known by its package path, not by the name it was
// registered under, which sql.OpenDB with a connector does not have.
var driverPackages = []struct {
	pkg     string
	dialect Dialect
}{
	{"github.com/jackc/pgx/v5/stdlib", PostgreSQL},
	{"github.com/jackc/pgx/v4/stdlib", PostgreSQL},
	{"github.com/lib/pq", PostgreSQL},
	{"github.com/go-sql-driver/mysql", MySQL},
}

// DialectOfDriver returns the dialect of drv, the driver of a *sql.DB
// (db.Driver()), from the package its type is declared in. A driver it
// does not know, such as a tracing wrapper around one it does, is an error
// matching ErrUnknownDriver that names the type: such a caller says the
// dialect explicitly.
func DialectOfDriver(drv driver.Driver) (Dialect, error) {
	if drv == nil {
		return Unset, fmt.Errorf("%w: the driver is nil", ErrUnknownDriver)
	}
	t := reflect.TypeOf(drv)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pkg := t.PkgPath()
	for _, p := range driverPackages {
		if pkg == p.pkg || strings.HasPrefix(pkg, p.pkg+"/") {
			return p.dialect, nil
		}
	}
	return Unset, fmt.Errorf("%w: %T is neither pgx's, lib/pq's nor go-sql-driver/mysql's: say the dialect (txoutbox.PostgreSQL or txoutbox.MySQL) explicitly",
		ErrUnknownDriver, drv)
}

// DialectProbe reads the server's version string, which tells PostgreSQL
// from MySQL and MariaDB: both have version(), and it cannot fail, so it
// does not abort a PostgreSQL transaction it runs in. For readers that have
// a connection or a transaction but no driver to ask (DialectOfVersion).
const DialectProbe = `SELECT version()`

// DialectOfVersion is the dialect of the server whose DialectProbe
// returned v.
func DialectOfVersion(v string) Dialect {
	if strings.HasPrefix(v, "PostgreSQL") {
		return PostgreSQL
	}
	return MySQL
}

// SQLState is the SQLSTATE of a PostgreSQL server error (pgconn.PgError's
// SQLState method) in err's chain, "" if there is none. MySQL's errors are
// told by their number (MySQLErrorNumber).
func SQLState(err error) string {
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		return pg.SQLState()
	}
	return ""
}

// MySQLErrorNumber is the server error number of a go-sql-driver/mysql
// error in err's chain (1064: a syntax error, 1213: a deadlock...), 0 if
// there is none.
func MySQLErrorNumber(err error) int {
	if e := mysqlError(err); e.IsValid() {
		if f := e.FieldByName("Number"); f.IsValid() && f.CanUint() {
			return int(f.Uint())
		}
	}
	return 0
}

// mysqlError is the struct of the first *mysql.MySQLError in err's chain,
// or the zero Value.
func mysqlError(err error) reflect.Value {
	for err != nil {
		v := reflect.ValueOf(err)
		if v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct {
			if t := v.Elem().Type(); t.PkgPath() == "github.com/go-sql-driver/mysql" && t.Name() == "MySQLError" {
				return v.Elem()
			}
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if v := mysqlError(e); v.IsValid() {
					return v
				}
			}
			return reflect.Value{}
		default:
			return reflect.Value{}
		}
	}
	return reflect.Value{}
}
