package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/migrations"
	"github.com/txoutbox/txoutbox/relay"
)

// pruneResult is the result of the prune scenario: the cost of retention
// per event pruned, by batched DELETE on an unpartitioned outbox and by
// dropping a partition of a partitioned one (docs/partitions.md), and the
// size of each table and its indexes once the prune ran.
type pruneResult struct {
	Scenario   string    `json:"scenario"`
	RowsPerDay int       `json:"rows_per_day"`
	Days       int       `json:"days"`
	Pruned     int       `json:"rows_pruned"`
	Delete     pruneSide `json:"delete"`
	Drop       pruneSide `json:"drop"`
}

// pruneSide is one arm of the prune scenario.
type pruneSide struct {
	*cost
	Seconds  float64 `json:"prune_seconds"`
	Left     int     `json:"rows_left"`
	TableMiB float64 `json:"table_mib"`
	IndexMiB float64 `json:"indexes_mib"`
}

// pruneDays is the simulated time: nine days of published events, of
// which the first two are past the week of retention when the relay
// prunes.
const pruneDays = 9

// insertDaySQL writes $2 published events numbered from $3, published $4
// days before now (less an hour).
const insertDaySQL = `
INSERT INTO {{table}} (event_id, topic, aggregate_type, aggregate_id, event_type, payload, state, created_at, published_at)
SELECT gen_random_uuid(), $1, 'bench', 'agg-' || lpad((g % 1000)::text, 5, '0'), 'bench.event',
       convert_to(format('{"agg":"agg-%s","seq":%s,"pad":"%s"}', lpad((g % 1000)::text, 5, '0'), g / 1000, $5::text), 'UTF8'),
       'published', now() - $4::int * interval '1 day' + interval '1 hour', now() - $4::int * interval '1 day' + interval '1 hour'
FROM generate_series($3::bigint, $3::bigint + $2 - 1) AS g`

// runPrune simulates pruneDays days of -prune-day-rows published events a
// day on two outboxes, one partitioned by a day's worth of ids, writing
// each day's rows in one statement, and then has a relay prune both with
// a week's retention (two days' rows, 2 × rows a day, go), metering the
// prune alone.
func runPrune(ctx context.Context, e *env) (pruneResult, error) {
	perDay := e.opts.pruneDayRows
	res := pruneResult{Scenario: "prune", RowsPerDay: perDay, Days: pruneDays, Pruned: 2 * perDay}
	for _, partitioned := range []bool{false, true} {
		name := "prune_delete"
		if partitioned {
			name = "prune_drop"
		}
		s, err := e.newSchema(ctx, name)
		if err != nil {
			return res, err
		}
		side, err := pruneArm(ctx, e, s, perDay, partitioned)
		s.close()
		if err != nil {
			return res, fmt.Errorf("%s: %w", name, err)
		}
		if partitioned {
			res.Drop = side
		} else {
			res.Delete = side
		}
	}
	return res, nil
}

func pruneArm(ctx context.Context, e *env, s *schemaDB, perDay int, partitioned bool) (pruneSide, error) {
	m, err := migrations.New(s.SQL, migrations.Config{Table: s.Table})
	if err != nil {
		return pruneSide{}, err
	}
	q := s.Names.Render(insertDaySQL)
	for day := range pruneDays {
		if partitioned {
			// As the relays' rounds would: the partitions ahead of the day.
			if err := m.Partition(ctx, int64(perDay)); err != nil {
				return pruneSide{}, err
			}
		}
		if _, err := s.SQL.ExecContext(ctx, q, "bench.prune", perDay, day*perDay+1, pruneDays-day, payloadPad); err != nil {
			return pruneSide{}, fmt.Errorf("day %d: %w", day, err)
		}
	}
	// Every row is published: the claim floor passes them all.
	if _, err := s.SQL.ExecContext(ctx, s.Names.Render(`UPDATE {{floor}} SET floor = (SELECT max(id) + 1 FROM {{table}}), gen = gen + 1`)); err != nil {
		return pruneSide{}, err
	}
	if _, err := s.SQL.ExecContext(ctx, "VACUUM ANALYZE "+s.Names.Table); err != nil {
		return pruneSide{}, err
	}
	r, err := relay.New(s.SQL, kafkatest.NopPublisher{}, relay.Config{Table: s.Table, Retention: 7 * 24 * time.Hour,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return pruneSide{}, err
	}
	checkpoint(ctx, s.SQL)
	meter := e.startMeter(ctx, s.SQL)
	start := time.Now()
	if _, err := r.Prune(ctx); err != nil {
		return pruneSide{}, err
	}
	side := pruneSide{Seconds: time.Since(start).Seconds()}
	side.cost = meter.stop(ctx, 2*perDay)
	var left int
	if err := s.SQL.QueryRowContext(ctx, s.Names.Render(`SELECT count(*) FROM {{table}}`)).Scan(&left); err != nil {
		return pruneSide{}, err
	}
	// A partition's rows past retention wait for its last one: the
	// partitions are a day's ids, not aligned with the days.
	if left < (pruneDays-2)*perDay || left >= (pruneDays-1)*perDay {
		return pruneSide{}, fmt.Errorf("%d rows left after the prune, want %d (and less than a day more)", left, (pruneDays-2)*perDay)
	}
	side.Left = left
	var table, indexes int64
	err = s.SQL.QueryRowContext(ctx, s.Names.Render(`SELECT sum(pg_table_size(r)), sum(pg_indexes_size(r))
		FROM (SELECT {{tableliteral}}::regclass AS r UNION ALL SELECT relid FROM pg_partition_tree({{tableliteral}}) WHERE isleaf) t`)).Scan(&table, &indexes)
	if err != nil {
		return pruneSide{}, err
	}
	side.TableMiB, side.IndexMiB = float64(table)/(1<<20), float64(indexes)/(1<<20)
	return side, nil
}
