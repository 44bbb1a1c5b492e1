package testkit

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/migrations"
)

// StartHint tells how to start the local PostgreSQL server; errors about an
// unreachable server end with it.
const StartHint = "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"

// EnsureDatabase creates the database name on the server at serverURL if it
// is missing, and returns the database's URL. A database created meanwhile
// by another process (tests and runs in parallel) counts as present.
func EnsureDatabase(ctx context.Context, serverURL, name string) (string, error) {
	dbURL, err := DatabaseURL(serverURL, name)
	if err != nil {
		return "", err
	}
	admin, err := sql.Open("pgx", serverURL)
	if err != nil {
		return "", err
	}
	defer admin.Close()
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := admin.PingContext(pingCtx); err != nil {
		return "", fmt.Errorf("connect to PostgreSQL at %s: %w (%s)", redact(serverURL), err, StartHint)
	}
	_, err = admin.ExecContext(ctx, "CREATE DATABASE "+ident.Quote(name))
	var pgErr *pgconn.PgError
	if err != nil && !(errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505")) {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return dbURL, nil
}

// DatabaseURL is serverURL with its database replaced by name.
func DatabaseURL(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// SearchPathURL is dbURL with its connections' search_path set to schema,
// quoted, so that any schema name works (a search_path is a list of
// identifiers, where a space or a comma would split one).
func SearchPathURL(dbURL, schema string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", ident.Quote(schema))
	// pgx reads "+" in a query as itself, not a space: spaces as %20
	// (Encode writes a "+" of the value as %2B).
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String(), nil
}

// Schema is a schema of its own in a database: a pool whose connections use
// it as their search_path, and the URL that does the same (for GORM, ent,
// pgxpool or a child process).
type Schema struct {
	SQL  *sql.DB
	URL  string
	Name string
}

// SchemaName is prefix, lower-cased with every character other than a
// letter or digit made an underscore and cut to 40 bytes, then a random
// suffix: a fresh schema name per test, scenario or run.
func SchemaName(prefix string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(prefix) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	r := make([]byte, 4)
	_, _ = rand.Read(r)
	return b.String() + "_" + hex.EncodeToString(r)
}

// CreateSchema creates schema in the database at dbURL and, with migrate,
// migrates the outbox of the default table name into it.
func CreateSchema(ctx context.Context, dbURL, schema string, migrate bool) (*Schema, error) {
	u, err := SearchPathURL(dbURL, schema)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("pgx", u)
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+ident.Quote(schema)); err != nil {
		db.Close()
		return nil, fmt.Errorf("create schema %s: %w", schema, err)
	}
	s := &Schema{SQL: db, URL: u, Name: schema}
	if migrate {
		m, err := migrations.New(db, migrations.Config{Table: s.Table()})
		if err == nil {
			_, err = m.Up(ctx)
		}
		if err != nil {
			_ = s.Drop(ctx)
			return nil, fmt.Errorf("migrate %s: %w", schema, err)
		}
	}
	return s, nil
}

// Table is the outbox table of the schema, schema-qualified.
func (s *Schema) Table() txoutbox.Table { return txoutbox.Table{Schema: s.Name} }

// Database is the name of the database the schema is in.
func (s *Schema) Database() string { return databaseOf(s.URL) }

// Drop drops the schema with everything in it, if a test did not first,
// and closes the pool.
func (s *Schema) Drop(ctx context.Context) error {
	defer s.SQL.Close()
	if _, err := s.SQL.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+ident.Quote(s.Name)+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", s.Name, err)
	}
	return nil
}

// redact hides a URL's password in messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the configured URL"
	}
	return u.Redacted()
}

// RevertOutboxTo reverts the outbox migrations of table (migrated by
// migrations.Migrator) until version is the newest applied: the outbox of
// an older release, for tests of the schema checks.
func RevertOutboxTo(t testing.TB, db *sql.DB, table txoutbox.Table, version int) {
	t.Helper()
	m, err := migrations.New(db, migrations.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	for {
		st, err := m.Status(context.Background())
		if err != nil {
			t.Fatalf("revert the outbox to version %d: %v", version, err)
		}
		newest := 0
		for _, s := range st {
			if s.AppliedAt != nil {
				newest = s.Version
			}
		}
		if newest <= version {
			return
		}
		if _, err := m.Down(context.Background()); err != nil {
			t.Fatalf("revert the outbox to version %d: %v", version, err)
		}
	}
}

// RecordOutboxVersion records version as applied to table's outbox
// schema, as a newer release's migrator would: a version this one does
// not know, for tests of the schema checks.
func RecordOutboxVersion(t testing.TB, db *sql.DB, table txoutbox.Table, version int, name string) {
	t.Helper()
	versions := ident.Qualified(table.Schema, cmp.Or(table.Name, txoutbox.TableNameDefault)+"_schema_migrations")
	if _, err := db.Exec("INSERT INTO "+versions+" (version, name) VALUES ($1, $2)", version, name); err != nil {
		t.Fatalf("record outbox version %d: %v", version, err)
	}
}
