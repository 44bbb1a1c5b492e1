package testkit

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/mysqldsn"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/migrations"
)

// Engine is a database server a test runs on.
type Engine struct {
	// Name is the subtest's name: "postgres" or "mysql".
	Name    string
	Dialect txoutbox.Dialect
}

// LeaseOwner is the lease_owner value of a row the relay incarnation
// token holds on e: the token on PostgreSQL, its key on MySQL
// (outboxsql.MySQLLeaseKey). Tests that lease rows by hand bind it.
func (e Engine) LeaseOwner(token string) any {
	if e.Dialect == txoutbox.MySQL {
		return outboxsql.MySQLLeaseKey(token)
	}
	return token
}

// Postgres is the PostgreSQL engine every test runs on.
var Postgres = Engine{Name: "postgres", Dialect: txoutbox.PostgreSQL}

// MySQL is the MySQL/MariaDB engine: the server of MySQLURL.
var MySQL = Engine{Name: "mysql", Dialect: txoutbox.MySQL}

// Engines returns the engines tests run on: PostgreSQL and MySQL (the
// MariaDB of .ci/services, or EnvMySQLURL's server). A server that does
// not answer fails the test (MySQLURL): the tests never leave one out.
func Engines(t testing.TB) []Engine {
	t.Helper()
	MySQLURL(t)
	return []Engine{Postgres, MySQL}
}

// mysqlServerURL is the MySQL server's URL: EnvMySQLURL or MySQLURLDefault.
func mysqlServerURL() string {
	if v := os.Getenv(EnvMySQLURL); v != "" {
		return v
	}
	return MySQLURLDefault
}

// ForEachEngine runs fn as a parallel subtest per engine of Engines,
// named after it.
func ForEachEngine(t *testing.T, fn func(t *testing.T, e Engine)) {
	t.Helper()
	for _, e := range Engines(t) {
		t.Run(e.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, e)
		})
	}
}

// NewDBOn is NewDB on engine e: on MySQL a database of the test's own
// (a schema is a database there), dropped when the test ends.
func NewDBOn(t testing.TB, e Engine) *DB {
	t.Helper()
	if e.Dialect == txoutbox.MySQL {
		return newMySQLDB(t, false)
	}
	return NewDB(t)
}

// NewOutboxOn is NewOutbox on engine e.
func NewOutboxOn(t testing.TB, e Engine) *DB {
	t.Helper()
	if e.Dialect == txoutbox.MySQL {
		return newMySQLDB(t, true)
	}
	return NewOutbox(t)
}

// Dialect is the test database's dialect.
func (d *DB) Dialect() txoutbox.Dialect {
	if d.mysql {
		return txoutbox.MySQL
	}
	return txoutbox.PostgreSQL
}

// DriverName is the database/sql driver name to open DSN with: "pgx" or
// "mysql".
func (d *DB) DriverName() string {
	if d.mysql {
		return "mysql"
	}
	return "pgx"
}

// DSN is what sql.Open(d.DriverName(), d.DSN()) and GORM's dialectors
// take: the URL on PostgreSQL, go-sql-driver's form on MySQL.
func (d *DB) DSN() string {
	if d.mysql {
		return d.mysqlDSN
	}
	return d.URL
}

// WriterConfig is cfg with the test's table and dialect.
func (d *DB) WriterConfig(cfg txoutbox.WriterConfig) txoutbox.WriterConfig {
	cfg.Table, cfg.Dialect = d.Table(), d.Dialect()
	return cfg
}

// Writer is NewWriter on the test's table and dialect.
func (d *DB) Writer(t testing.TB) *txoutbox.Writer {
	t.Helper()
	w, err := txoutbox.NewWriter(d.WriterConfig(txoutbox.WriterConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// Q renders a test's statement for the database: "$1" placeholders become
// "?" on MySQL, and ::text casts and a "::jsonb" go; for the few queries
// tests write that differ only there.
func (d *DB) Q(query string) string {
	if !d.mysql {
		return query
	}
	var b strings.Builder
	for i := 0; i < len(query); i++ {
		if query[i] == '$' && i+1 < len(query) && query[i+1] >= '0' && query[i+1] <= '9' {
			b.WriteByte('?')
			for i+1 < len(query) && query[i+1] >= '0' && query[i+1] <= '9' {
				i++
			}
			continue
		}
		b.WriteByte(query[i])
	}
	return strings.NewReplacer("::text", "", "::jsonb", "").Replace(b.String())
}

// MySQLNumbers returns an expression and the FROM list it reads, a cross
// join of digit tables d0, d1, ...: the expression numbers the join's
// rows from 0 to at least n-1, for a test's INSERT ... SELECT of n rows
// (with "WHERE expr < n"). Both servers run it: MariaDB's seq_0_to_N
// tables are not MySQL's, and MySQL stops a recursive CTE at 1,000
// levels by default.
func MySQLNumbers(n int) (expr, from string) {
	const digit = `(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
     UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`
	var terms, tables []string
	for place := 1; place < n || len(tables) == 0; place *= 10 {
		terms = append(terms, fmt.Sprintf("%d * d%d.d", place, len(tables)))
		tables = append(tables, fmt.Sprintf("%s d%d", digit, len(tables)))
	}
	return strings.Join(terms, " + "), strings.Join(tables, ", ")
}

// mysqlAdmin is the pool on the MySQL server's database that creates and drops
// the tests' databases, opened once per test binary.
var mysqlAdmin = sync.OnceValues(func() (*sql.DB, error) {
	if !slices.Contains(sql.Drivers(), "mysql") {
		// The relay's tests use testkit: importing the driver here would
		// put it in the module graph of every user of the relay.
		return nil, fmt.Errorf("no %q database/sql driver in this test binary: a test package on MySQL imports _ \"github.com/go-sql-driver/mysql\", "+
			"from a module users do not import (integration, cmd/outbox, examples)", "mysql")
	}
	dsn, err := mysqldsn.FromURL(mysqlServerURL())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvMySQLURL, err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to MySQL at %s: %w (bash .ci/services mariadb starts MariaDB)", redact(mysqlServerURL()), err)
	}
	return db, nil
})

// newMySQLDB creates a database of the test's own on the MySQL server,
// migrated with the outbox if migrate, and drops it when the test ends.
func newMySQLDB(t testing.TB, migrate bool) *DB {
	t.Helper()
	admin, err := mysqlAdmin()
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	name := SchemaName("t_" + t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+outboxsql.MySQLQuote(name)); err != nil {
		t.Fatalf("testkit: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+outboxsql.MySQLQuote(name)); err != nil {
			t.Logf("testkit: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(mysqlServerURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	dsn, err := mysqldsn.FromURL(u.String())
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if migrate {
		m, err := migrations.New(db, migrations.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Up(ctx); err != nil {
			t.Fatalf("testkit: migrate %s: %v", name, err)
		}
	}
	return &DB{SQL: db, URL: u.String(), Schema: name, mysql: true, mysqlDSN: dsn}
}
