package main

import (
	"fmt"
	"io"

	"github.com/txoutbox/txoutbox/outboxadmin"
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

// walSlotOf is the slot outboxadmin's Status found, as status shows it;
// nil when there is none in the database.
func walSlotOf(s *outboxadmin.SlotStatus) *walSlot {
	if s == nil {
		return nil
	}
	return &walSlot{Name: s.Name, Active: s.Active, WALStatus: s.WALStatus, LagBytes: s.LagBytes}
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
