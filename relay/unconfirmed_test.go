package relay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

type nopPublisher struct{}

func (nopPublisher) Publish(string, ...*message.Message) error { return nil }
func (nopPublisher) Close() error                              { return nil }

// A claim whose commit reply was lost leaves rows claimed that no lane
// publishes. The next claim releases them first, so they are published in
// order instead of after a lease expiry, behind later events.
func TestClaimAfterUnconfirmedCommitReleasesItsRows(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	ctx := context.Background()
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	tx, _ := db.SQL.Begin()
	for i := range 6 {
		e, _ := txoutbox.NewEvent("orders", "order", "k", "order.changed", i)
		if err := w.Write(ctx, tx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r, err := New(db.SQL, nopPublisher{}, Config{Table: db.Table(), ID: "r1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.rebalance(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	// The lost claim: rows 1-3 claimed by r1, whose commit reply never came.
	if _, err := db.SQL.Exec(`UPDATE outbox SET state = 'claimed', lease_owner = 'r1', lease_expires_at = now() + interval '1 hour' WHERE id <= 3`); err != nil {
		t.Fatal(err)
	}
	r.unconfirmed = []*claimedRow{{id: 1}, {id: 2}, {id: 3}}
	rows, err := r.claim(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, row := range rows {
		got += fmt.Sprint(row.id, " ")
	}
	if got != "1 2 3 4 5 6 " {
		t.Fatalf("claimed rows %q, want 1 2 3 4 5 6: the unconfirmed claim's rows first, in order", got)
	}
	if len(r.unconfirmed) != 0 {
		t.Fatal("unconfirmed rows kept after releasing them")
	}
}
