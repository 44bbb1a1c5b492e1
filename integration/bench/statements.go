package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// stmtStat is one statement's share of a drain, from pg_stat_statements:
// every statement of the database between the meter's readings, the
// relays' periodic rounds included, not only the claims and marks that
// -sql-stats sees from the client side.
type stmtStat struct {
	Query string `json:"query"`
	Calls int64  `json:"calls"`
	// Plans is how many times the server planned it: once per call for a
	// custom plan, once per connection and invalidation for a generic one
	// (the cluster has pg_stat_statements.track_planning on).
	Plans int64 `json:"plans"`
	Rows  int64 `json:"rows"`
	// ExecMS and PlanMS are the server's time (not CPU alone: a wait on a
	// lock counts) executing and planning the statement.
	ExecMS float64 `json:"exec_ms"`
	PlanMS float64 `json:"plan_ms"`
	// BlocksHit and BlocksRead are the shared buffers it touched.
	BlocksHit  int64 `json:"blocks_hit"`
	BlocksRead int64 `json:"blocks_read"`
	WALBytes   int64 `json:"wal_bytes"`
}

// statementsReset empties pg_stat_statements for a drain. It needs the
// extension in shared_preload_libraries (-own-cluster's cluster has it).
func statementsReset(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return fmt.Errorf("-statements: %w", err)
	}
	if _, err := db.ExecContext(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return fmt.Errorf("-statements: %w (pg_stat_statements must be in shared_preload_libraries: -own-cluster's cluster has it)", err)
	}
	return nil
}

// statementsRead returns the database's statements since the reset, the
// costliest first; the meter's own readings are left out.
func statementsRead(ctx context.Context, db *sql.DB) ([]stmtStat, error) {
	rows, err := db.QueryContext(ctx, `
SELECT query, calls, plans, rows, total_exec_time, total_plan_time, shared_blks_hit, shared_blks_read, wal_bytes::int8
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_current_wal_lsn%'
ORDER BY total_exec_time + total_plan_time DESC`)
	if err != nil {
		return nil, fmt.Errorf("-statements: %w", err)
	}
	defer rows.Close()
	var out []stmtStat
	for rows.Next() {
		var s stmtStat
		if err := rows.Scan(&s.Query, &s.Calls, &s.Plans, &s.Rows, &s.ExecMS, &s.PlanMS, &s.BlocksHit, &s.BlocksRead, &s.WALBytes); err != nil {
			return nil, fmt.Errorf("-statements: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

var spaces = regexp.MustCompile(`\s+`)

// shortQuery is a statement's first words on one line.
func shortQuery(q string) string {
	q = strings.TrimSpace(spaces.ReplaceAllString(q, " "))
	if len(q) > 110 {
		q = q[:110] + "…"
	}
	return q
}

// logStatements prints a drain's statements per event: calls, plans, rows
// and server time per 1,000 events, and the statement's first words.
func logStatements(scenario string, round, events int, stats []stmtStat) {
	logf("statements of %s round %d, per 1,000 events: calls plans rows exec_ms plan_ms blocks wal_kb | query", scenario, round)
	per := 1000 / float64(events)
	for _, s := range stats {
		q := shortQuery(s.Query)
		logf("  %8.2f %8.2f %8.1f %8.2f %7.2f %8.0f %7.1f | %s", float64(s.Calls)*per, float64(s.Plans)*per, float64(s.Rows)*per, s.ExecMS*per, s.PlanMS*per,
			float64(s.BlocksHit+s.BlocksRead)*per, float64(s.WALBytes)*per/1024, q)
	}
}

// pgParts is a reading of the cluster's processes' CPU by kind: client
// backends, autovacuum, the WAL writer and the other background processes,
// by the title each sets (for -statements).
type pgParts struct {
	byPID  map[int]time.Duration
	kind   map[int]string
	reaped time.Duration // the postmaster's reaped children
}

func readPGParts(postmaster int) (pgParts, error) {
	p := pgParts{byPID: map[int]time.Duration{}, kind: map[int]string{}}
	pm, err := readProcStat(postmaster)
	if err != nil {
		return p, err
	}
	p.reaped = pm.cutime + pm.cstim
	pids, err := childPIDs(postmaster)
	if err != nil {
		return p, err
	}
	for pid := range pids {
		st, err := readProcStat(pid)
		if err != nil || st.ppid != postmaster {
			continue
		}
		p.byPID[pid] = st.utime + st.stime + st.cutime + st.cstim
		p.kind[pid] = processKind(pid)
	}
	return p, nil
}

// processKind names a server process by its title ("postgres: 15/main:
// autovacuum worker", "postgres: 15/main: postgres db 127.0.0.1(5432) idle").
func processKind(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return "gone"
	}
	t := string(bytes.TrimRight(b, "\x00"))
	for _, k := range []string{"autovacuum worker", "autovacuum launcher", "walwriter", "checkpointer", "background writer", "logical replication", "stats", "walsender"} {
		if strings.Contains(t, k) {
			return k
		}
	}
	return "backend"
}

// pgPartsPerEvent returns each kind's CPU per event between a and b, in
// microseconds; the children that ended between them are "ended".
func pgPartsPerEvent(a, b pgParts, events int) map[string]float64 {
	out := map[string]float64{}
	add := func(k string, d time.Duration) { out[k] += float64(d.Microseconds()) / float64(events) }
	for pid, cpu := range b.byPID {
		add(b.kind[pid], cpu-a.byPID[pid]) // a child new since a starts at 0
	}
	for pid, cpu := range a.byPID {
		if _, ok := b.byPID[pid]; !ok {
			add("ended", -cpu) // its whole CPU is in reaped: count only what it used since a
		}
	}
	add("ended", b.reaped-a.reaped)
	return out
}
