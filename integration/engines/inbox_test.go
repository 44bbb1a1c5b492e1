package engines_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox/inbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// TestClaimAndPruneOnEveryEngine: the first delivery claims, a redelivery
// does not, a rolled-back claim leaves the event unclaimed, and Prune
// removes what is older than asked.
func TestClaimAndPruneOnEveryEngine(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		ctx := context.Background()
		db := testkit.NewDBOn(t, e)
		m, err := migrations.New(db.SQL, migrations.Config{Set: migrations.Inbox, Table: db.Table()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Up(ctx); err != nil {
			t.Fatal(err)
		}
		table := db.Table()
		table.Name = inbox.TableNameDefault
		ib, err := inbox.New(inbox.Config{Table: table, Dialect: db.Dialect()})
		if err != nil {
			t.Fatal(err)
		}
		id := uuid.Must(uuid.NewV7())
		claim := func(commit bool) bool {
			t.Helper()
			tx, err := db.SQL.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback() //nolint:errcheck // committed below when asked
			first, err := ib.Claim(ctx, tx, "billing", id)
			if err != nil {
				t.Fatal(err)
			}
			if commit {
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			return first
		}
		if !claim(false) {
			t.Fatal("the first delivery was not first")
		}
		if !claim(true) {
			t.Fatal("after a rolled-back claim, the delivery was not first")
		}
		if claim(true) {
			t.Fatal("a redelivery was first")
		}
		if n, err := ib.Prune(ctx, db.SQL, time.Hour); err != nil || n != 0 {
			t.Fatalf("Prune(1h) = %d, %v; want nothing that young pruned", n, err)
		}
		testkit.WaitFor(t, 10*time.Second, "the claim to be a millisecond old", func() bool {
			n, err := ib.Prune(ctx, db.SQL, time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			return n == 1
		})
	})
}
