package outboxadmin

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
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
	LeaseOwner    string // the relay holding a claimed row
}

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// rowsQuerier is *sql.DB, *sql.Conn or *sql.Tx.
type rowsQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryRows runs query and reads every row it returns with scan.
func queryRows(ctx context.Context, q rowsQuerier, scan func(scanner, ...any) (Row, error), query string, args ...any) ([]Row, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// decode sets r's EventID and Headers from the stored event id and
// headers: headers that are not a JSON object of strings go to
// RawHeaders, with why in HeadersError.
func (r *Row) decode(eventID, headers string) error {
	id, err := uuid.Parse(eventID)
	if err != nil {
		return fmt.Errorf("row %d: event id: %w", r.ID, err)
	}
	r.EventID = id
	if err := json.Unmarshal([]byte(headers), &r.Headers); err != nil {
		r.Headers = nil
		r.RawHeaders = json.RawMessage(headers)
		r.HeadersError = "not a JSON object of strings: " + err.Error()
	}
	return nil
}

// eachRow is a statement's rows (the results of QueryContext) read one by
// one with fn, then closed.
func eachRow(rows *sql.Rows, err error) func(fn func(scanner) error) error {
	return func(fn func(scanner) error) error {
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := fn(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
}
