package main

import (
	"context"
	"database/sql"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// benchDatabase holds every scenario's schema, so a run never touches
// application data on the server.
const benchDatabase = "txoutbox_bench"

// env is what every scenario shares: the PostgreSQL database, the broker
// process and a scratch directory.
type env struct {
	dbURL  string // the bench database on the -database-url server
	broker string // the kfake broker process's address
	tmp    string // scratch directory for built binaries and profiles
	opts   options
}

// schemaDB is one scenario's fresh, migrated schema, dropped by close.
type schemaDB struct {
	SQL    *sql.DB
	URL    string // the same database with search_path set to Schema
	Schema string
	Table  txoutbox.Table
	Names  outboxsql.Names
	ts     *testkit.Schema
}

// newSchema creates a fresh schema named after the scenario and migrates
// the outbox into it.
func (e *env) newSchema(ctx context.Context, scenario string) (*schemaDB, error) {
	ts, err := testkit.CreateSchema(ctx, e.dbURL, testkit.SchemaName("bench_"+scenario), true)
	if err != nil {
		return nil, err
	}
	s := &schemaDB{SQL: ts.SQL, URL: ts.URL, Schema: ts.Name, Table: ts.Table(), ts: ts}
	// As relay.New's documentation asks: room for the relay's concurrent
	// loops (and for 3 relays sharing this pool), so no scenario pays for
	// reconnecting.
	s.SQL.SetMaxIdleConns(24)
	if s.Names, err = outboxsql.NamesFor(s.Table.Schema, s.Table.Name); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// close drops the schema and closes the pool.
func (s *schemaDB) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.ts.Drop(ctx); err != nil {
		logf("%v", err)
	}
}
