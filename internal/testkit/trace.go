package testkit

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Statement is one statement a traced pool ran to its end.
type Statement struct {
	SQL        string
	Start, End time.Time
	Err        error
	Rows       int64 // the rows its command tag counts (updated, returned, ...)
}

// Statements records what a traced pool ran: the signal that the code
// under test reached the database, which a test waits for instead of
// sleeping a guess.
type Statements struct {
	mu   sync.Mutex
	done []Statement
}

// Matching returns the statements that ended, in the order they ended,
// whose SQL contains substr and which started at or after since.
func (s *Statements) Matching(substr string, since time.Time) []Statement {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Statement
	for _, st := range s.done {
		if strings.Contains(st.SQL, substr) && !st.Start.Before(since) {
			out = append(out, st)
		}
	}
	return out
}

type startKey struct{}

type start struct {
	sql string
	at  time.Time
}

// TraceQueryStart implements pgx.QueryTracer.
func (s *Statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, startKey{}, start{sql: data.SQL, at: time.Now()})
}

// TraceQueryEnd implements pgx.QueryTracer.
func (s *Statements) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	st, _ := ctx.Value(startKey{}).(start)
	s.mu.Lock()
	s.done = append(s.done, Statement{SQL: st.sql, Start: st.at, End: time.Now(), Err: data.Err, Rows: data.CommandTag.RowsAffected()})
	s.mu.Unlock()
}

type batchKey struct{}

// TraceBatchStart implements pgx.BatchTracer: the statements of a batch
// (the relay sends a claim's first three as one) start when it is sent.
func (s *Statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, batchKey{}, time.Now())
}

// TraceBatchQuery implements pgx.BatchTracer: a statement of a batch ends
// when its result has been read.
func (s *Statements) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	at, _ := ctx.Value(batchKey{}).(time.Time)
	s.mu.Lock()
	s.done = append(s.done, Statement{SQL: data.SQL, Start: at, End: time.Now(), Err: data.Err, Rows: data.CommandTag.RowsAffected()})
	s.mu.Unlock()
}

// TraceBatchEnd implements pgx.BatchTracer.
func (s *Statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// Traced opens another pool on the test's schema whose statements are
// recorded in the returned Statements. It is closed when the test ends.
func (d *DB) Traced(t testing.TB) (*sql.DB, *Statements) {
	t.Helper()
	cfg, err := pgx.ParseConfig(d.URL)
	if err != nil {
		t.Fatalf("testkit: parse %s: %v", redact(d.URL), err)
	}
	s := &Statements{}
	cfg.Tracer = s
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return db, s
}
