package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/migrations"
)

// benchDatabase holds every scenario's schema, so a run never touches
// application data on the server.
const benchDatabase = "txoutbox_bench"

// env is what every scenario shares: the PostgreSQL server, the broker
// process and a scratch directory.
type env struct {
	serverURL string // the server, as given by -database-url
	broker    string // the kfake broker process's address
	tmp       string // scratch directory for built binaries and profiles
	opts      options
}

// schemaDB is one scenario's fresh, migrated schema, dropped by close.
type schemaDB struct {
	SQL    *sql.DB
	URL    string // the same database with search_path set to Schema
	Schema string
	Table  txoutbox.Table
	Names  outboxsql.Names
	admin  *sql.DB
}

// ensureDatabase creates the bench database if it is missing.
func ensureDatabase(ctx context.Context, serverURL string) error {
	admin, err := sql.Open("pgx", serverURL)
	if err != nil {
		return fmt.Errorf("open %s: %w", serverURL, err)
	}
	defer admin.Close()
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := admin.PingContext(pingCtx); err != nil {
		return fmt.Errorf("connect to PostgreSQL at %s: %w (start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start)", serverURL, err)
	}
	_, err = admin.ExecContext(ctx, "CREATE DATABASE "+benchDatabase)
	var pgErr *pgconn.PgError
	if err != nil && !(errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505")) {
		return fmt.Errorf("create database %s: %w", benchDatabase, err)
	}
	return nil
}

// databaseURL returns the bench database's URL, with search_path set when
// schema is not empty.
func (e *env) databaseURL(schema string) (string, error) {
	u, err := url.Parse(e.serverURL)
	if err != nil {
		return "", fmt.Errorf("parse -database-url: %w", err)
	}
	u.Path = "/" + benchDatabase
	q := u.Query()
	if schema != "" {
		q.Set("search_path", schema)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// newSchema creates a fresh schema named after the scenario and migrates
// the outbox into it.
func (e *env) newSchema(ctx context.Context, scenario string) (*schemaDB, error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	schema := "bench_" + scenario + "_" + hex.EncodeToString(b)
	adminURL, err := e.databaseURL("")
	if err != nil {
		return nil, err
	}
	admin, err := sql.Open("pgx", adminURL)
	if err != nil {
		return nil, err
	}
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA "`+schema+`"`); err != nil {
		admin.Close()
		return nil, fmt.Errorf("create schema %s: %w", schema, err)
	}
	s := &schemaDB{Schema: schema, Table: txoutbox.Table{Schema: schema}, admin: admin}
	if s.URL, err = e.databaseURL(schema); err != nil {
		s.close()
		return nil, err
	}
	if s.SQL, err = sql.Open("pgx", s.URL); err != nil {
		s.close()
		return nil, err
	}
	// As relay.New's documentation asks: room for the relay's concurrent
	// loops (and for 3 relays sharing this pool), so no scenario pays for
	// reconnecting.
	s.SQL.SetMaxIdleConns(24)
	if s.Names, err = outboxsql.NamesFor(s.Table.Schema, s.Table.Name); err != nil {
		s.close()
		return nil, err
	}
	m, err := migrations.New(s.SQL, migrations.Config{Table: s.Table})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("migrator: %w", err)
	}
	if _, err := m.Up(ctx); err != nil {
		s.close()
		return nil, fmt.Errorf("migrate %s: %w", schema, err)
	}
	return s, nil
}

// close drops the schema and closes the pools.
func (s *schemaDB) close() {
	if s.SQL != nil {
		s.SQL.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := s.admin.ExecContext(ctx, `DROP SCHEMA "`+s.Schema+`" CASCADE`); err != nil {
		logf("drop schema %s: %v", s.Schema, err)
	}
	s.admin.Close()
}
