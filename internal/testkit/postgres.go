package testkit

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"
)

// EnvDatabaseURL overrides the server the tests use. Default:
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable.
const EnvDatabaseURL = "TXOUTBOX_TEST_DATABASE_URL"

// testDatabase is the database every test schema lives in.
const testDatabase = "txoutbox_test"

// DB is one test's isolated PostgreSQL schema, or its own MySQL database
// (NewDBOn).
type DB struct {
	// SQL is a pool whose connections use Schema as their search_path.
	SQL *sql.DB
	// URL connects to the same database with the same search_path, for
	// GORM, ent, pgxpool or a child process.
	URL string
	// Schema is the test's own schema, dropped when the test ends; on
	// MySQL, its database.
	Schema string

	mysql    bool
	mysqlDSN string
}

// ServerURL returns the URL of the PostgreSQL server tests use.
func ServerURL() string {
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// ensured remembers, per server URL, the outcome of creating the test
// database, so each server is asked once per test binary.
var ensured sync.Map // server URL -> func() (string, error) (a sync.OnceValues)

func ensureDatabase(serverURL string) (string, error) {
	f, _ := ensured.LoadOrStore(serverURL, sync.OnceValues(func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return EnsureDatabase(ctx, serverURL, testDatabase)
	}))
	return f.(func() (string, error))()
}

// NewDB creates a fresh schema for the test in the shared test database and
// drops it when the test ends.
func NewDB(t testing.TB) *DB {
	t.Helper()
	return NewDBAt(t, ServerURL())
}

// NewDBAt is NewDB on another server, such as a Cluster of the test's own.
func NewDBAt(t testing.TB, serverURL string) *DB {
	t.Helper()
	return newDB(t, serverURL, false)
}

func newDB(t testing.TB, serverURL string, migrate bool) *DB {
	t.Helper()
	dbURL, err := ensureDatabase(serverURL)
	if err != nil {
		t.Fatalf("testkit: PostgreSQL at %s is not usable: %v", redact(serverURL), err)
	}
	s := NewSchema(t, dbURL, SchemaName("t_"+t.Name()), migrate)
	return &DB{SQL: s.SQL, URL: s.URL, Schema: s.Name}
}

// NewSchema is CreateSchema for a test: schema name in the database at
// dbURL, with the outbox migrated if migrate, dropped when the test ends
// unless the test dropped it itself (a tenant that goes away, say).
func NewSchema(t testing.TB, dbURL, name string, migrate bool) *Schema {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := CreateSchema(ctx, dbURL, name, migrate)
	if err != nil {
		t.Fatalf("testkit: %v; %s", err, StartHint)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Drop(ctx); err != nil {
			t.Logf("testkit: %v", err)
		}
	})
	return s
}

// NewOutbox is NewDB with the outbox schema migrated for the default table.
func NewOutbox(t testing.TB) *DB {
	t.Helper()
	return NewOutboxAt(t, ServerURL())
}

// NewOutboxAt is NewOutbox on another server, such as a Cluster of the
// test's own.
func NewOutboxAt(t testing.TB, serverURL string) *DB {
	t.Helper()
	return newDB(t, serverURL, true)
}

// Table is the outbox table of this test's schema, schema-qualified.
// On MySQL it is unqualified: the connection names the test's database.
func (d *DB) Table() txoutbox.Table {
	if d.mysql {
		return txoutbox.Table{}
	}
	return txoutbox.Table{Schema: d.Schema}
}

// Database is the name of the database the test's schema is in: what the
// WAL relay's default slot name is made of, with the table.
func (d *DB) Database() string { return databaseOf(d.URL) }

// databaseOf is the database a URL names, "" if it cannot be parsed.
func databaseOf(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

// ExampleOutbox is NewOutbox for a runnable Example, which has no
// testing.TB: a fresh schema with the outbox migrated, and a function that
// drops it. An Example calls it and stops (log.Fatal) on an error.
func ExampleOutbox(name string) (*Schema, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dbURL, err := ensureDatabase(ServerURL())
	if err != nil {
		return nil, nil, fmt.Errorf("testkit: PostgreSQL at %s is not usable: %w", redact(ServerURL()), err)
	}
	s, err := CreateSchema(ctx, dbURL, SchemaName("x_"+name), true)
	if err != nil {
		return nil, nil, fmt.Errorf("testkit: %w; %s", err, StartHint)
	}
	return s, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Drop(ctx)
	}, nil
}

// exampleDrops are the drops DropAfterExamples was given, which
// ExamplesMain calls.
var exampleDrops struct {
	sync.Mutex
	fns []func()
}

// DropAfterExamples has ExamplesMain call drop (ExampleOutbox's) once the
// test binary's Examples have run: a runnable copy of a package's Example
// (SameExamples) cannot defer it, as its body is the package's, word for
// word.
func DropAfterExamples(drop func()) {
	exampleDrops.Lock()
	defer exampleDrops.Unlock()
	exampleDrops.fns = append(exampleDrops.fns, drop)
}

// ExamplesMain is a TestMain that runs m, then every drop given to
// DropAfterExamples, and exits with m's code.
func ExamplesMain(m *testing.M) {
	code := m.Run()
	exampleDrops.Lock()
	for _, drop := range exampleDrops.fns {
		drop()
	}
	exampleDrops.Unlock()
	os.Exit(code)
}

// NewDatabase creates a database of the test's own on the test server,
// for what differs between databases (replication slots are the
// server's), and returns its URL. When the test ends it ends the
// database's walsenders, drops its replication slots (a database that has
// one cannot be dropped), then the database.
func NewDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := SchemaName("d_" + t.Name())
	dbURL, err := EnsureDatabase(ctx, ServerURL(), name)
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dropDatabase(ctx, name); err != nil {
			t.Errorf("testkit: drop database %s: %v", name, err)
		}
	})
	return dbURL
}

// dropDatabase drops database name with its replication slots.
func dropDatabase(ctx context.Context, name string) error {
	admin, err := sql.Open("pgx", ServerURL())
	if err != nil {
		return err
	}
	defer admin.Close()
	for {
		_, err = admin.ExecContext(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name)
		if err == nil {
			_, err = admin.ExecContext(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name)
		}
		if err == nil {
			break
		}
		select { // a walsender ended a moment ago still holds its slot
		case <-ctx.Done():
			return fmt.Errorf("drop its replication slots: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	_, err = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+ident.Quote(name)+" WITH (FORCE)")
	return err
}
