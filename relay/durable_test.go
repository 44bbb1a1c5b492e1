package relay

import (
	"context"
	"testing"

	"github.com/txoutbox/txoutbox"
)

// A writer that commits asynchronously makes its row visible before its WAL
// is flushed. A claim that takes the row commits durably, which flushes
// the writer's commit too, before anything is published: the WAL is
// flushed past the writer's commit once the claim returns.
func TestClaimMakesAsyncCommitsDurable(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	r := b.readyRelay(t, "r1")
	ctx := context.Background()
	for round := range 20 {
		conn, err := b.db.SQL.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			t.Fatal(err)
		}
		e, _ := txoutbox.NewEvent("orders", "order", "k", "order.changed", round)
		if err := b.w.Write(ctx, tx, e); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		// At least the end of the writer's commit record.
		var committed string
		if err := conn.QueryRowContext(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&committed); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		rows, err := r.claimer.claim(ctx, 10)
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim: %d rows, %v", len(rows), err)
		}
		var flushed bool
		if err := b.db.SQL.QueryRow(`SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn`, committed).Scan(&flushed); err != nil {
			t.Fatal(err)
		}
		if !flushed {
			t.Fatalf("round %d: the claim returned a row whose writer's commit (up to %s) is not flushed yet: a crash now would lose a row the relay may publish", round, committed)
		}
		if _, err := b.db.SQL.Exec(`UPDATE outbox SET state = 'published', lease_owner = NULL WHERE id = $1`, rows[0].id); err != nil {
			t.Fatal(err)
		}
	}
}
