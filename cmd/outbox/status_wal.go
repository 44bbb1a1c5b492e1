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

// readWALSlot reads slot if it exists in the database; by default the
// slot a WAL relay streams the table from, found through the table
// (outboxsql.OpsWALSlots: of the default name, an earlier version's, or
// named in a relay's marker). A slot of another database is another
// database's outbox's, and not shown.
func readWALSlot(ctx context.Context, db *sql.DB, table txoutbox.Table, slot string) (*walSlot, error) {
	if slot == "" {
		names, err := outboxsql.NamesFor(table.Schema, table.Name)
		if err != nil {
			return nil, err
		}
		var found string
		args := outboxsql.WALSlotsArgs{Table: names.Table, Slot: outboxsql.WALLegacyName(table.Schema, table.Name)}
		if err := db.QueryRowContext(ctx, outboxsql.OpsWALSlots, args.Args()...).Scan(&found); err != nil {
			return nil, fmt.Errorf("look for the WAL relay's slot: %w", err)
		}
		if found == "" {
			return nil, nil
		}
		slot, _, _ = strings.Cut(found, ", ")
	}
	s := walSlot{Name: slot}
	var (
		confirmed, plugin, database string
		here                        bool
	)
	err := db.QueryRowContext(ctx, outboxsql.WALSlot, slot).Scan(&s.Active, &s.WALStatus, &confirmed, &plugin, &database, &s.LagBytes, &here)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !here {
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
