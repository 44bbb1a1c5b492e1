package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/txoutbox/txoutbox"
)

// payloadPad makes every event about 200 bytes, the size the targets were
// set for: {"agg":"agg-00042","seq":12345,"pad":"xxx..."}.
var payloadPad = strings.Repeat("x", 150)

// benchPayload is an event's body: its aggregate and its position among
// that aggregate's events, which the order check reads back.
type benchPayload struct {
	Agg string `json:"agg"`
	Seq int    `json:"seq"`
	Pad string `json:"pad,omitempty"`
}

// aggregateID is the id of event i's aggregate: events go round-robin over
// the aggregates, so event i is number i/aggregates of its aggregate.
func aggregateID(i, aggregates int) string { return fmt.Sprintf("agg-%05d", i%aggregates) }

// benchEvent is event i of a backlog, built in Go for the write paths that
// go through txoutbox or Watermill.
func benchEvent(topic string, i, aggregates int) txoutbox.Event {
	agg := aggregateID(i, aggregates)
	payload, _ := json.Marshal(benchPayload{Agg: agg, Seq: i / aggregates, Pad: payloadPad})
	ev, _ := txoutbox.NewEvent(topic, "bench", agg, "bench.event", json.RawMessage(payload))
	return ev
}

// insertBacklogSQL writes $2 events into the outbox in one statement, the
// same events benchEvent builds, in state $4. Setup only: generating the
// rows in the server takes seconds for a million of them, where the Writer
// would take a minute, and the backlog's rows are the same either way.
const insertBacklogSQL = `
INSERT INTO {{table}} (event_id, topic, aggregate_type, aggregate_id, event_type, payload, state, published_at)
SELECT gen_random_uuid(), $1, 'bench', 'agg-' || lpad((g % $3)::text, 5, '0'), 'bench.event',
       convert_to(format('{"agg":"agg-%s","seq":%s,"pad":"%s"}', lpad((g % $3)::text, 5, '0'), g / $3, $5::text), 'UTF8'),
       $4::text, CASE WHEN $4::text = 'published' THEN now() END
FROM generate_series($6::bigint, $6::bigint + $2 - 1) AS g`

// insertBacklog writes n events for topic over aggregates, numbered from
// first, then vacuums and analyzes the table so the planner sees what a
// relay would see on a table autovacuum keeps up with. It checkpoints
// first (see checkpoint).
//
// On MySQL it writes them through txoutbox.Writer (insertMySQLBacklog), in
// state pending only.
func insertBacklog(ctx context.Context, s *schemaDB, topic string, n, aggregates int, state string, first int) error {
	if s.mysql {
		if state != "pending" {
			return fmt.Errorf("a backlog of %s events on MySQL: not ported", state)
		}
		return insertMySQLBacklog(ctx, s, topic, n, aggregates, first)
	}
	checkpoint(ctx, s.SQL)
	q := s.Names.Render(insertBacklogSQL)
	const chunk = 200_000 // no statement runs for long
	for done := 0; done < n; done += chunk {
		k := min(chunk, n-done)
		if _, err := s.SQL.ExecContext(ctx, q, topic, k, aggregates, state, payloadPad, first+done); err != nil {
			return fmt.Errorf("write backlog of %d events: %w", n, err)
		}
	}
	if _, err := s.SQL.ExecContext(ctx, "VACUUM ANALYZE "+s.Names.Table); err != nil {
		return fmt.Errorf("analyze backlog: %w", err)
	}
	return nil
}

// checkpoint runs a CHECKPOINT before a drain's backlog is written, so
// that no checkpoint falls between the backlog's writes and its drain: the
// drain's first change of each page then logs no full-page image, and
// every drain does the same work whatever the server's checkpoint timer
// says. Without it, the checkpoints that the run's WAL and
// checkpoint_timeout set off landed in some drains and not others: those
// drains logged a full-page image of every page of the backlog they
// changed (1,127 and 1,314 WAL bytes per event instead of 981) and cost
// PostgreSQL a fifth more CPU per event, which made the relay-to-plain
// ratio of a round swing by as much. A backlog written once and drained
// after a checkpoint is a real case (a relay catching up after an
// outage); the drains measure the per-event work, which is the same
// either way. CHECKPOINT needs the pg_checkpoint role or a superuser; on a
// server that refuses it the drains go on without.
func checkpoint(ctx context.Context, db *sql.DB) {
	if _, err := db.ExecContext(ctx, "CHECKPOINT"); err != nil {
		checkpointOnce.Do(func() { logf("CHECKPOINT before the backlogs refused (%v): a checkpoint may fall inside a drain", err) })
	}
}

var checkpointOnce sync.Once

// insertBacklogRows writes n pending events numbered from first in one
// statement.
func insertBacklogRows(ctx context.Context, s *schemaDB, topic string, n, aggregates, first int) error {
	if _, err := s.SQL.ExecContext(ctx, s.Names.Render(insertBacklogSQL), topic, n, aggregates, "pending", payloadPad, first); err != nil {
		return fmt.Errorf("write %d events: %w", n, err)
	}
	return nil
}

// unpublishedSQL is true while any row is pending or claimed; it reads the
// claim index, so polling it stays cheap as the backlog drains.
const unpublishedSQL = `SELECT EXISTS (SELECT 1 FROM {{table}} WHERE state IN ('pending', 'claimed'))`

// backlogSQL counts the rows a drain must publish.
const backlogSQL = `SELECT count(*) FROM {{table}} WHERE state IN ('pending', 'claimed')`

// With rows scheduled beside the backlog (-scheduled), a drain is done when
// the rows that never failed and are due are published (outbox_fresh_idx:
// a scheduled row is written with its retry_at at its not_before). The
// bench's drains fail on a dead row, and a row retried after a failure
// would end them early by a few events, which they do not have on kfake.
const (
	unpublishedDueSQL = `SELECT EXISTS (SELECT 1 FROM {{table}} WHERE state IN ('pending', 'claimed') AND retry_at = '-infinity')`
	backlogDueSQL     = `SELECT count(*) FROM {{table}} WHERE state IN ('pending', 'claimed') AND retry_at = '-infinity'`
)

// insertScheduled writes n rows scheduled a week ahead, each of an
// aggregate of its own, as the Writer writes an event with a NotBefore
// (not_before, and retry_at and next_attempt_at at it), and analyzes the
// table. The drains of s then wait only for the rows due.
func insertScheduled(ctx context.Context, s *schemaDB, topic string, n int) error {
	if n == 0 {
		return nil
	}
	const chunk = 200_000
	for done := 0; done < n; done += chunk {
		_, err := s.SQL.ExecContext(ctx, s.Names.Render(`
INSERT INTO {{table}} (event_id, topic, aggregate_id, event_type, payload, not_before, retry_at, next_attempt_at)
SELECT gen_random_uuid(), $1, 'scheduled-' || g, 'bench.event', '{}', t, t, t
FROM generate_series($2::bigint, $3::bigint) AS g, (SELECT now() + interval '7 days' AS t) w`), topic, done, done+min(chunk, n-done)-1)
		if err != nil {
			return fmt.Errorf("write %d scheduled rows: %w", n, err)
		}
	}
	s.scheduled = n
	_, err := s.SQL.ExecContext(ctx, "VACUUM ANALYZE "+s.Names.Table)
	return err
}

// deadSQL counts dead rows: a benchmark run must have none.
const deadSQL = `SELECT count(*) FROM {{table}} WHERE state = 'dead'`

// waitDrained polls until no row is pending or claimed and returns when it
// saw that; it fails on a dead row or after timeout.
func waitDrained(ctx context.Context, s *schemaDB, timeout time.Duration) (time.Time, error) {
	return waitDrainedOn(ctx, s.SQL, s, timeout)
}

// rowQuerier is a *sql.DB or a *sql.Conn.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// poller runs the harness's own queries about a drain (the backlog, whether
// it is drained) on one connection, whose server process a meter leaves out
// of the PostgreSQL CPU (meter.exclude): after the drain the claim index
// still holds an entry for every published row until vacuum, and walking
// them to see that nothing is left cost more than 0.5 µs per event, which
// the relay does not do and the plain loop, which counts its own marks,
// does not pay.
//
// On MySQL, whose connections are threads of one process, the poller's
// share of mysqld's CPU is not left out: meteredDrain counts the backlog
// before the meter starts, and a drain polls only once its events are
// acknowledged (relayRun.drain), on an index of the unpublished rows.
type poller struct {
	s    *schemaDB
	conn *sql.Conn
	pid  int // the connection's backend (0 on MySQL)
	// counted is the backlog, once counted: a poller serves one drain.
	counted *int64
}

func newPoller(ctx context.Context, s *schemaDB) (*poller, error) {
	conn, err := s.SQL.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("poller connection: %w", err)
	}
	p := &poller{s: s, conn: conn}
	if s.mysql {
		return p, nil
	}
	if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&p.pid); err != nil {
		conn.Close()
		return nil, fmt.Errorf("poller backend: %w", err)
	}
	return p, nil
}

// backlog counts the rows the drain must publish, the first time it is
// called.
func (p *poller) backlog(ctx context.Context) (int64, error) {
	if p.counted != nil {
		return *p.counted, nil
	}
	var n int64
	q := backlogSQL
	if p.s.scheduled > 0 {
		q = backlogDueSQL
	}
	if err := p.conn.QueryRowContext(ctx, p.s.Names.Render(q)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count backlog: %w", err)
	}
	p.counted = &n
	return n, nil
}

func (p *poller) waitDrained(ctx context.Context, timeout time.Duration) (time.Time, error) {
	return waitDrainedOn(ctx, p.conn, p.s, timeout)
}

func (p *poller) close() { p.conn.Close() }

// errNotDrained is waitDrained's error when its timeout passes with rows
// left.
var errNotDrained = errors.New("backlog not drained")

func waitDrainedOn(ctx context.Context, db rowQuerier, s *schemaDB, timeout time.Duration) (time.Time, error) {
	q := s.Names.Render(unpublishedSQL)
	if s.scheduled > 0 {
		q = s.Names.Render(unpublishedDueSQL)
	}
	deadline := time.Now().Add(timeout)
	for {
		var left bool
		if err := db.QueryRowContext(ctx, q).Scan(&left); err != nil {
			return time.Time{}, fmt.Errorf("poll backlog: %w", err)
		}
		if !left {
			now := time.Now()
			var dead int
			if err := db.QueryRowContext(ctx, s.Names.Render(deadSQL)).Scan(&dead); err != nil {
				return time.Time{}, fmt.Errorf("count dead rows: %w", err)
			}
			if dead > 0 {
				return time.Time{}, fmt.Errorf("%d events went dead", dead)
			}
			return now, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%w after %s", errNotDrained, timeout)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
