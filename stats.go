package txoutbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// Stats is the state of an outbox, for health checks and dashboards. The
// relay exports the same figures as metrics; package outboxadmin shows them
// with the relays.
//
// The counts are exact up to StatsExactMax rows and estimates beyond
// (BacklogEstimated, DeadEstimated), so that reading them costs the same
// with a backlog of a thousand rows or of forty million.
type Stats struct {
	// Backlog counts unpublished events (pending or claimed).
	Backlog int64 `json:"backlog"`
	// BacklogEstimated is set when the backlog reached StatsExactMax and
	// Backlog is an estimate (outbox status and the console show "~N"):
	// StatsExactMax plus the id range of the rest, which follows a drain
	// as it goes and overestimates where rows were published out of id
	// order.
	BacklogEstimated bool `json:"backlog_estimated,omitempty"`
	// Lag is the age of the oldest unpublished event by created_at (which
	// need not follow id order), zero when there is none. Alert on it: a relay that is up but stuck shows a growing lag,
	// whereas the backlog alone looks the same whether its events are two
	// seconds or two hours old.
	Lag time.Duration `json:"lag"`
	// Dead counts dead events waiting for an operator.
	Dead int64 `json:"dead"`
	// DeadEstimated is set when the dead events reached StatsExactMax and
	// Dead is PostgreSQL's statistics of the dead-letter indexes (as of
	// the table's last VACUUM or ANALYZE), never below StatsExactMax.
	DeadEstimated bool `json:"dead_estimated,omitempty"`
	// Topics breaks the same figures down per topic (ReadTopicStats only).
	Topics []TopicStats `json:"topics,omitempty"`
}

// StatsExactMax is how many unpublished, and how many dead, events Stats
// counts one by one; beyond it the counts are estimates.
const StatsExactMax = outboxsql.CountCap

// TopicStatsMax is how many unpublished, and how many dead, events of
// each topic TopicStats counts: a topic with more shows TopicStatsMax and
// BacklogAtLeast or DeadAtLeast.
const TopicStatsMax = outboxsql.TopicCountCap

// TopicStats is Stats for one topic.
type TopicStats struct {
	Topic   string `json:"topic"`
	Backlog int64  `json:"backlog"`
	// BacklogAtLeast is set when the topic has TopicStatsMax unpublished
	// events or more, Backlog being TopicStatsMax ("≥N" in outbox status
	// and the console).
	BacklogAtLeast bool          `json:"backlog_at_least,omitempty"`
	Lag            time.Duration `json:"lag"`
	Dead           int64         `json:"dead"`
	// DeadAtLeast is BacklogAtLeast for Dead.
	DeadAtLeast bool `json:"dead_at_least,omitempty"`
}

// ReadStats reads backlog, lag and dead count of the outbox in table with
// one query. It reads at most StatsExactMax entries of the claim index and
// of a dead-letter index, and one entry of the lag index, whatever the
// backlog and the dead letters (see Stats). Lag is measured with the
// database clock.
func ReadStats(ctx context.Context, db *sql.DB, table Table) (Stats, error) {
	names, err := outboxsql.NamesFor(table.Schema, table.Name)
	if err != nil {
		return Stats{}, err
	}
	return readStats(ctx, db, names.Render(outboxsql.Stats))
}

func readStats(ctx context.Context, db *sql.DB, query string) (Stats, error) {
	var (
		s      Stats
		oldest sql.NullTime
		now    time.Time
	)
	args := outboxsql.CountArgs{Cap: StatsExactMax}.Args()
	if err := db.QueryRowContext(ctx, query, args...).Scan(&s.Backlog, &oldest, &s.Dead, &now); err != nil {
		return Stats{}, fmt.Errorf("read outbox stats: %w", err)
	}
	s.BacklogEstimated, s.DeadEstimated = s.Backlog >= StatsExactMax, s.Dead >= StatsExactMax
	if oldest.Valid {
		s.Lag = max(now.Sub(oldest.Time), 0)
	}
	return s, nil
}

// ReadTopicStats is ReadStats with a per-topic breakdown in Stats.Topics.
// Per topic it reads at most TopicStatsMax entries of the topic indexes
// (schema version 6) and one descent to the next topic, so its cost grows
// with the number of topics, not of events; it suits a CLI or a dashboard
// refresh rather than a tight health check.
func ReadTopicStats(ctx context.Context, db *sql.DB, table Table) (Stats, error) {
	names, err := outboxsql.NamesFor(table.Schema, table.Name)
	if err != nil {
		return Stats{}, err
	}
	s, err := readStats(ctx, db, names.Render(outboxsql.Stats))
	if err != nil {
		return Stats{}, err
	}
	rows, err := db.QueryContext(ctx, names.Render(outboxsql.TopicStats), outboxsql.CountArgs{Cap: TopicStatsMax}.Args()...)
	if err != nil {
		return Stats{}, fmt.Errorf("read topic stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			t   TopicStats
			lag sql.NullFloat64
		)
		if err := rows.Scan(&t.Topic, &t.Backlog, &lag, &t.Dead); err != nil {
			return Stats{}, fmt.Errorf("read topic stats: %w", err)
		}
		if lag.Valid {
			t.Lag = max(time.Duration(lag.Float64*float64(time.Second)), 0)
		}
		t.BacklogAtLeast, t.DeadAtLeast = t.Backlog >= TopicStatsMax, t.Dead >= TopicStatsMax
		s.Topics = append(s.Topics, t)
	}
	if err := rows.Err(); err != nil {
		return Stats{}, fmt.Errorf("read topic stats: %w", err)
	}
	return s, nil
}
