package outboxadmin

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// Row is an outbox row as an operator sees it.
type Row struct {
	// ID is the row's position in the outbox (its bigint key), which the
	// CLI takes as an event's ID. EventID is the event's own id, the one
	// consumers deduplicate on.
	ID            int64
	EventID       uuid.UUID
	Topic         string
	AggregateType string
	AggregateID   string
	Type          string
	ContentType   string
	// Payload is read by Event only; PayloadBytes is always set.
	Payload      []byte
	PayloadBytes int
	// Headers are the event's headers, nil when the stored ones are not a
	// JSON object of strings (rows other tooling wrote, which the relay
	// dead-letters at once): RawHeaders then holds them as stored and
	// HeadersError says why, so such a row can still be shown, retried
	// and dropped.
	Headers       map[string]string
	RawHeaders    json.RawMessage
	HeadersError  string
	CreatedAt     time.Time
	State         string // pending, claimed, published or dead
	Attempts      int
	NextAttemptAt time.Time
	LastError     string
	PublishedAt   *time.Time
	// LeaseOwner is the relay incarnation holding a claimed row. On MySQL,
	// whose outbox stores a key of it, it is the incarnation's id from the
	// relays table, or the key in hex when that relay has left.
	LeaseOwner string
}

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// rowsQuerier is *sql.DB, *sql.Conn or *sql.Tx.
type rowsQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryRows runs query and reads every row it returns with scanRow.
func queryRows(ctx context.Context, q rowsQuerier, query string, args ...any) ([]Row, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	return collect(rows, err, func(s scanner) (Row, error) { return scanRow(s) })
}

// collect reads every row of a statement (the results of QueryContext)
// with scan, then closes them.
func collect[T any](rows *sql.Rows, err error, scan func(scanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// scanRow reads the columns of outboxsql's opsRowColumns (PostgreSQL) or
// mysqlOpsRowColumns, which are the same, then extra. The times scan into
// MySQLTime, which takes a time.Time as the driver gives it (pgx; MySQL's
// with parseTime=true) and reads MySQL's text otherwise, as the DSN need
// not say parseTime=true.
func scanRow(s scanner, extra ...any) (Row, error) {
	var (
		r                        Row
		eventID, headers         string
		created, next, published outboxsql.MySQLTime
	)
	dest := append([]any{&r.ID, &eventID, &r.Topic, &r.AggregateType, &r.AggregateID, &r.Type, &r.ContentType,
		&r.PayloadBytes, &headers, &created, &r.State, &r.Attempts, &next,
		&r.LastError, &published, &r.LeaseOwner}, extra...)
	if err := s.Scan(dest...); err != nil {
		return Row{}, err
	}
	r.CreatedAt, r.NextAttemptAt = created.Time, next.Time
	if published.Valid {
		t := published.Time
		r.PublishedAt = &t
	}
	id, err := uuid.Parse(eventID)
	if err != nil {
		return Row{}, fmt.Errorf("row %d: event id: %w", r.ID, err)
	}
	r.EventID = id
	if err := json.Unmarshal([]byte(headers), &r.Headers); err != nil {
		r.Headers = nil
		r.RawHeaders = json.RawMessage(headers)
		r.HeadersError = "not a JSON object of strings: " + err.Error()
	}
	return r, nil
}
