package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// observer is told of every statement a pool ran: its text, the rows it
// returned (queries) or affected (execs), and its time from sending to the
// last row read.
type observer func(query string, rows int, took time.Duration)

// observedDB opens a pgx pool that reports every statement to obs. The relay
// takes any *sql.DB, so this sees exactly what it runs.
func observedDB(url string, obs observer) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	return sql.OpenDB(&observedConnector{Connector: stdlib.GetConnector(*cfg), obs: obs}), nil
}

type observedConnector struct {
	driver.Connector
	obs observer
}

func (c *observedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := conn.(*stdlib.Conn)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("observed connector: unexpected connection type %T", conn)
	}
	return &observedConn{Conn: sc, obs: c.obs}, nil
}

// observedConn is a pgx connection (every optional driver interface
// promoted from *stdlib.Conn) that reports its statements.
type observedConn struct {
	*stdlib.Conn
	obs observer
}

func (c *observedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	start := time.Now()
	rows, err := c.Conn.QueryContext(ctx, query, args)
	if err != nil {
		return nil, err
	}
	return &observedRows{Rows: rows, query: query, start: start, obs: c.obs}, nil
}

func (c *observedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	start := time.Now()
	res, err := c.Conn.ExecContext(ctx, query, args)
	if err != nil {
		return nil, err
	}
	n, _ := res.RowsAffected()
	c.obs(query, int(n), time.Since(start))
	return res, nil
}

// observedRows reports the query when its last row was read.
type observedRows struct {
	driver.Rows
	query string
	start time.Time
	obs   observer
	n     int
	done  bool
}

func (r *observedRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if err == nil {
		r.n++
	} else if err == io.EOF && !r.done {
		r.done = true
		r.obs(r.query, r.n, time.Since(r.start))
	}
	return err
}

// sqlStats sums the relay's claim and mark statements, for finding where a
// drain's time goes.
type sqlStats struct {
	claim, mark string
	mu          sync.Mutex
	by          map[string]*sqlStat
}

// sqlStat is one kind of statement's total.
type sqlStat struct {
	N     int     `json:"n"`
	Rows  int     `json:"rows"`
	MS    float64 `json:"total_ms"`
	AvgMS float64 `json:"avg_ms"`
}

func newSQLStats(n outboxsql.Names) *sqlStats {
	return &sqlStats{claim: n.Render(outboxsql.Claim), mark: n.Render(outboxsql.MarkPublished), by: map[string]*sqlStat{}}
}

func (s *sqlStats) observe(query string, rows int, took time.Duration) {
	kind := "other"
	switch query {
	case s.claim:
		kind = "claim"
	case s.mark:
		kind = "mark_published"
	}
	s.mu.Lock()
	st := s.by[kind]
	if st == nil {
		st = &sqlStat{}
		s.by[kind] = st
	}
	st.N++
	st.Rows += rows
	st.MS += took.Seconds() * 1000
	st.AvgMS = st.MS / float64(st.N)
	s.mu.Unlock()
}

func (s *sqlStats) snapshot() map[string]sqlStat {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]sqlStat, len(s.by))
	for k, v := range s.by {
		out[k] = *v
	}
	return out
}
