package inboxe2e

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"
)

// BenchmarkRun measures one first delivery end to end: begin, claim, a
// one-row business update, commit.
func BenchmarkRun(b *testing.B) {
	bb := setupAccount(b)
	ctx := context.Background()
	for b.Loop() {
		id := uuid.Must(uuid.NewV7())
		if _, err := bb.ib.Run(ctx, bb.db.SQL, "billing", id, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, credit)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// setupAccount is setup with the account the benchmarks credit.
func setupAccount(b *testing.B) *bundle {
	bb := setup(b)
	if _, err := bb.db.SQL.Exec(`INSERT INTO accounts (id) VALUES ('acct-1')`); err != nil {
		b.Fatal(err)
	}
	return bb
}

// credit is the benchmarks' business update.
const credit = `UPDATE accounts SET balance = balance + 1 WHERE id = 'acct-1'`

// BenchmarkRunDuplicate measures skipping a redelivery.
func BenchmarkRunDuplicate(b *testing.B) {
	bb := setup(b)
	ctx := context.Background()
	id := uuid.Must(uuid.NewV7())
	fn := func(tx *sql.Tx) error { return nil }
	if _, err := bb.ib.Run(ctx, bb.db.SQL, "billing", id, fn); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if processed, err := bb.ib.Run(ctx, bb.db.SQL, "billing", id, fn); processed || err != nil {
			b.Fatal(processed, err)
		}
	}
}

// BenchmarkBaseline is BenchmarkRun without the inbox, for the claim's cost.
func BenchmarkBaseline(b *testing.B) {
	bb := setupAccount(b)
	ctx := context.Background()
	for b.Loop() {
		tx, err := bb.db.SQL.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, credit); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPrune measures deleting 10,000 expired rows among 10,000 live
// ones, in the default batches of 1,000; ns/op is per pruned row.
func BenchmarkPrune(b *testing.B) {
	bb := setup(b)
	ctx := context.Background()
	const rows = 10000
	if _, err := bb.db.SQL.Exec(`INSERT INTO inbox (consumer, event_id) SELECT 'live', gen_random_uuid() FROM generate_series(1, $1)`, rows); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i += rows {
		b.StopTimer()
		if _, err := bb.db.SQL.Exec(`INSERT INTO inbox (consumer, event_id, processed_at)
			SELECT 'old', gen_random_uuid(), now() - interval '30 days' FROM generate_series(1, $1)`, rows); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		n, err := bb.ib.Prune(ctx, bb.db.SQL, 7*24*time.Hour)
		if err != nil || n != rows {
			b.Fatal(n, err)
		}
	}
}
