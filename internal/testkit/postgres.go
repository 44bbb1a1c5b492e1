package testkit

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/migrations"
)

// EnvDatabaseURL overrides the server the tests use. Default:
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable.
const EnvDatabaseURL = "TXOUTBOX_TEST_DATABASE_URL"

// testDatabase is the database every test schema lives in.
const testDatabase = "txoutbox_test"

const startHint = "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"

// DB is one test's isolated PostgreSQL schema.
type DB struct {
	// SQL is a pool whose connections use Schema as their search_path.
	SQL *sql.DB
	// URL connects to the same database with the same search_path, for
	// GORM, ent, pgxpool or a child process.
	URL string
	// Schema is the test's own schema, dropped when the test ends.
	Schema string
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
var ensured sync.Map // server URL -> func() error (a sync.OnceValue)

func ensureDatabase(serverURL string) error {
	f, _ := ensured.LoadOrStore(serverURL, sync.OnceValue(func() error { return createTestDatabase(serverURL) }))
	return f.(func() error)()
}

func createTestDatabase(serverURL string) error {
	admin, err := sql.Open("pgx", serverURL)
	if err != nil {
		return err
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		return err
	}
	_, err = admin.ExecContext(ctx, "CREATE DATABASE "+testDatabase)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505") {
		return nil // created already, possibly by a test package running in parallel
	}
	return err
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
	if err := ensureDatabase(serverURL); err != nil {
		t.Fatalf("testkit: PostgreSQL at %s is not usable (%v); %s", serverURL, err, startHint)
	}
	schema := "t_" + sanitize(t.Name()) + "_" + randomHex(4)
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("testkit: parse %s: %v", EnvDatabaseURL, err)
	}
	u.Path = "/" + testDatabase
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()

	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatalf("testkit: open: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA "`+schema+`"`); err != nil {
		db.Close()
		t.Fatalf("testkit: create schema %s: %v; %s", schema, err, startHint)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, `DROP SCHEMA "`+schema+`" CASCADE`); err != nil {
			t.Logf("testkit: drop schema %s: %v", schema, err)
		}
		db.Close()
	})
	return &DB{SQL: db, URL: u.String(), Schema: schema}
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
	db := NewDBAt(t, serverURL)
	m, err := migrations.New(db.SQL, migrations.Config{Table: txoutbox.Table{Schema: db.Schema}})
	if err != nil {
		t.Fatalf("testkit: migrator: %v", err)
	}
	if _, err := m.Up(context.Background()); err != nil {
		t.Fatalf("testkit: migrate: %v", err)
	}
	return db
}

// Table is the outbox table of this test's schema, schema-qualified.
func (d *DB) Table() txoutbox.Table { return txoutbox.Table{Schema: d.Schema} }

func sanitize(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return b.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
