package txoutbox

import (
	"context"
	"database/sql"
	"errors"
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
// with a backlog of a thousand rows or of forty million. On MySQL and
// MariaDB a count stops at StatsExactMax, its flag set (see ReadStats).
type Stats struct {
	// Backlog counts unpublished events (pending or claimed) that are due:
	// Scheduled ones are not part of it.
	Backlog int64 `json:"backlog"`
	// BacklogEstimated is set when the backlog reached StatsExactMax and
	// Backlog is an estimate (outbox status and the console show "~N"):
	// StatsExactMax plus the id range of the rest, which follows a drain
	// as it goes and overestimates where rows were published out of id
	// order.
	BacklogEstimated bool `json:"backlog_estimated,omitempty"`
	// Lag is how long the oldest due unpublished event has been due: since
	// its created_at (which need not follow id order), or its NotBefore if
	// later. Zero when there is none: an event scheduled for later is not
	// lag. An event held behind a scheduled event of its aggregate (one
	// written after a delayed event, with the same aggregate id) is due,
	// and counts here, though it waits by design: see DueLag.
	Lag time.Duration `json:"lag"`
	// DueLag is Lag for the events the relay may publish now: it leaves
	// out the events held behind a scheduled event of their aggregate,
	// whose Lag grows until the scheduled event's time on a healthy
	// outbox. Alert on it: a relay that is up but stuck shows a growing
	// DueLag, whereas the backlog alone looks the same whether its events
	// are two seconds or two hours old. It is Lag when nothing is held.
	// Reading it walks past the held events ahead of the first one not
	// held, StatsExactMax at most; past that many, it is an upper bound.
	DueLag time.Duration `json:"due_lag"`
	// Dead counts dead events waiting for an operator.
	Dead int64 `json:"dead"`
	// DeadEstimated is set when the dead events reached StatsExactMax and
	// Dead is PostgreSQL's statistics of the dead-letter indexes (as of
	// the table's last VACUUM or ANALYZE), never below StatsExactMax.
	DeadEstimated bool `json:"dead_estimated,omitempty"`
	// Scheduled counts unpublished events written with a NotBefore still
	// to come, exactly up to StatsExactMax and beyond it from PostgreSQL's
	// statistics of the scheduled index (ScheduledEstimated), as Dead;
	// NextScheduled is the earliest of those times (zero when there is
	// none). They are neither backlog nor lag until then.
	Scheduled          int64     `json:"scheduled"`
	ScheduledEstimated bool      `json:"scheduled_estimated,omitempty"`
	NextScheduled      time.Time `json:"next_scheduled,omitzero"`
	// Topics breaks the same figures down per topic (ReadTopicStats only).
	Topics []TopicStats `json:"topics,omitempty"`
}

// StatsExactMax (100,000) is how many unpublished, and how many dead,
// events Stats counts one by one; beyond it the counts are estimates.
const StatsExactMax = outboxsql.CountCap

// TopicStatsMax (10,000) is how many unpublished, and how many dead,
// events of each topic TopicStats counts: a topic with more shows
// TopicStatsMax and BacklogAtLeast or DeadAtLeast.
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
	// Scheduled counts the topic's scheduled events, read after its due
	// ones: a lower bound when Backlog and Scheduled add up to
	// TopicStatsMax.
	Scheduled int64 `json:"scheduled"`
}

// ReadStats reads backlog, lag, dead and scheduled counts of the outbox in
// table with one query. It reads at most StatsExactMax entries of the
// claim index, of a dead-letter index and of the scheduled index, one
// entry of the due index for Lag and, for DueLag, one more and one probe
// for each event held behind a scheduled one ahead of it (StatsExactMax at
// most), whatever the backlog and the dead letters (see Stats). Lag is
// measured with the database clock.
//
// On MySQL and MariaDB (the dialect of db, as DetectDialect finds it) it
// reads the same fields in one statement, with two differences the schema
// makes: a count that reaches StatsExactMax stays there, flagged by its
// Estimated field, as InnoDB has no statistics close enough to estimate
// the rest (a Backlog flagged so is at least its value); and the walk for
// DueLag has no cap, so with many events held behind scheduled ones it
// reads them all, bounded by ctx (and is zero when every due event is
// held).
func ReadStats(ctx context.Context, db *sql.DB, table Table) (Stats, error) {
	dialect, err := DetectDialect(ctx, db)
	if err != nil {
		return Stats{}, fmt.Errorf("read outbox stats: %w", err)
	}
	names, err := outboxsql.NamesForDialect(outboxsql.Dialect(dialect), table.Schema, table.Name)
	if err != nil {
		return Stats{}, err
	}
	if dialect == MySQL {
		return readMySQLStats(ctx, db, names)
	}
	return readStats(ctx, db, names)
}

func readStats(ctx context.Context, db *sql.DB, names outboxsql.Names) (Stats, error) {
	var (
		s      Stats
		oldest sql.NullTime
		next   sql.NullTime
		due    sql.NullTime
		now    time.Time
	)
	args := outboxsql.CountArgs{Cap: StatsExactMax}.Args()
	if err := db.QueryRowContext(ctx, names.Render(outboxsql.StatsScheduled), args...).Scan(&s.Backlog, &oldest, &s.Dead, &now, &s.Scheduled, &next, &due); err != nil {
		return Stats{}, fmt.Errorf("read outbox stats: %w", err)
	}
	s.setCounts(outboxsql.CountsOf(s.Backlog, s.Dead, s.Scheduled))
	s.setTimes(now, oldest, due, next)
	return s, nil
}

// readMySQLStats is readStats on MySQL (outboxsql.MySQLStats). The times
// scan into MySQLTime, as the DSN need not say parseTime=true.
func readMySQLStats(ctx context.Context, db *sql.DB, names outboxsql.Names) (Stats, error) {
	var (
		s                        Stats
		unpublished              int64
		oldest, due, next, clock outboxsql.MySQLTime
	)
	args := outboxsql.MySQLCountArgs{Cap: StatsExactMax, Counts: 3}.Args()
	if err := db.QueryRowContext(ctx, names.Render(outboxsql.MySQLStats), args...).Scan(&unpublished, &s.Dead, &s.Scheduled, &oldest, &due, &next, &clock); err != nil {
		return Stats{}, fmt.Errorf("read outbox stats: %w", err)
	}
	s.setCounts(outboxsql.CountsOf(unpublished, s.Dead, s.Scheduled))
	nullTime := func(t outboxsql.MySQLTime) sql.NullTime { return sql.NullTime{Time: t.Time, Valid: t.Valid} }
	s.setTimes(clock.Time, nullTime(oldest), nullTime(due), nullTime(next))
	return s, nil
}

// setTimes sets Lag and DueLag from the due times oldest and due read at
// the database clock now, and NextScheduled.
func (s *Stats) setTimes(now time.Time, oldest, due, next sql.NullTime) {
	if oldest.Valid {
		s.Lag = max(now.Sub(oldest.Time), 0)
	}
	if due.Valid {
		s.DueLag = max(now.Sub(due.Time), 0)
	}
	if next.Valid {
		s.NextScheduled = next.Time
	}
}

// ReadTopicStats is ReadStats with a per-topic breakdown in Stats.Topics.
// Per topic it reads at most TopicStatsMax entries of the topic indexes
// (schema version 6) and one descent to the next topic, so its cost grows
// with the number of topics, not of events; it suits a CLI or a dashboard
// refresh rather than a tight health check.
//
// On MySQL and MariaDB it returns an error matching errors.ErrUnsupported
// and reads nothing: the MySQL schema has no index of the dead events by
// topic, so a topic's dead count would read every published row of the
// topic. ReadStats has the totals.
func ReadTopicStats(ctx context.Context, db *sql.DB, table Table) (Stats, error) {
	dialect, err := DetectDialect(ctx, db)
	if err != nil {
		return Stats{}, fmt.Errorf("read topic stats: %w", err)
	}
	if dialect == MySQL {
		return Stats{}, fmt.Errorf("read topic stats: %w on MySQL: the schema has no index of the dead events by topic; ReadStats reads the totals", errors.ErrUnsupported)
	}
	names, err := outboxsql.NamesFor(table.Schema, table.Name)
	if err != nil {
		return Stats{}, err
	}
	s, err := readStats(ctx, db, names)
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
		if err := rows.Scan(&t.Topic, &t.Backlog, &lag, &t.Dead, &t.Scheduled); err != nil {
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

// setCounts sets the totals from c (see outboxsql.CountsOf).
func (s *Stats) setCounts(c outboxsql.Counts) {
	s.Backlog, s.Dead, s.Scheduled = c.Backlog, c.Dead, c.Scheduled
	s.BacklogEstimated, s.DeadEstimated, s.ScheduledEstimated = c.BacklogEstimated, c.DeadEstimated, c.ScheduledEstimated
}
