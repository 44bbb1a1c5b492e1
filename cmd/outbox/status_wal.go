package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// walSlot is the WAL relay's replication slot, as `outbox status` shows
// it: how much WAL it holds back (lag_bytes, what to alert on), and
// wal_status: reserved or extended are fine, unreserved means it is about
// to pass max_slot_wal_keep_size, lost means events may be gone.
type walSlot struct {
	Name      string `json:"name"`
	Active    bool   `json:"active"`
	WALStatus string `json:"wal_status"`
	LagBytes  int64  `json:"lag_bytes"`
}

// readWALSlot reads slot if it exists; by default the slot a WAL relay
// streams the table from, found through the table (outboxsql.OpsWALSlots),
// or of the table's default name.
func readWALSlot(ctx context.Context, db *sql.DB, table txoutbox.Table, slot string) (*walSlot, error) {
	if slot == "" {
		slot = outboxsql.WALName(table.Schema, table.Name)
		var found string
		if err := db.QueryRowContext(ctx, outboxsql.OpsWALSlots, table.String(), slot).Scan(&found); err == nil && found != "" {
			slot, _, _ = strings.Cut(found, ", ")
		}
	}
	s := walSlot{Name: slot}
	var confirmed, plugin, database string
	err := db.QueryRowContext(ctx, outboxsql.WALSlot, slot).Scan(&s.Active, &s.WALStatus, &confirmed, &plugin, &database, &s.LagBytes)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read replication slot %s: %w", slot, err)
	}
	return &s, nil
}

func printWALSlot(w io.Writer, s *walSlot) error {
	state := "inactive (no relay streams from it)"
	if s.Active {
		state = "active"
	}
	_, err := fmt.Fprintf(w, "\nwal slot %s: %s, wal_status %s, lag %d bytes\n", s.Name, state, s.WALStatus, s.LagBytes)
	if err == nil && s.WALStatus == "lost" {
		_, err = fmt.Fprintln(w, "the slot is LOST: PostgreSQL removed WAL it needed; run `outbox wal takeover` and the polling relay")
	}
	return err
}
