package inboxe2e

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/inbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// bundle is one test's database: a fresh schema with the inbox migrated and
// a ledger table that records every business effect, so a double
// application shows up as a second row rather than being masked by a
// constraint.
type bundle struct {
	db *testkit.DB
	ib *inbox.Inbox
}

func setup(t testing.TB) *bundle {
	t.Helper()
	db := testkit.NewDB(t)
	ctx := context.Background()
	table := txoutbox.Table{Schema: db.Schema}
	m, err := migrations.New(db.SQL, migrations.Config{Set: migrations.Inbox, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL.ExecContext(ctx, `
		CREATE TABLE ledger (consumer text NOT NULL, event_id uuid NOT NULL, account text NOT NULL, amount bigint NOT NULL);
		CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{Table: txoutbox.Table{Schema: db.Schema}})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{db: db, ib: ib}
}

// effect is the business change of one event: a ledger line and a balance
// increment, on the given transaction.
func effect(ctx context.Context, tx txoutbox.SQLExecer, consumer string, id uuid.UUID, account string, amount int64) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO ledger (consumer, event_id, account, amount) VALUES ($1, $2, $3, $4)`,
		consumer, id.String(), account, amount); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO accounts (id, balance) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + excluded.balance`, account, amount)
	return err
}

// count runs a count(*) query.
func count(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// errBoom is the error of a handler that fails after applying its effect.
var errBoom = errors.New("boom")

// effectOrFail applies effect and then, if fail, fails with errBoom: the
// rollback must take the effect back.
func effectOrFail(ctx context.Context, tx txoutbox.SQLExecer, consumer string, id uuid.UUID, account string, amount int64, fail bool) error {
	if err := effect(ctx, tx, consumer, id, account, amount); err != nil {
		return err
	}
	if fail {
		return errBoom
	}
	return nil
}

// checkRedeliveries delivers one billing event three times with deliver:
// first failing with errBoom, then twice succeeding. The failure must leave
// the event unprocessed, the first redelivery process it and the second skip
// it, so its effect is applied once.
func checkRedeliveries(t *testing.T, b *bundle, id uuid.UUID, deliver func(fail bool) (processed bool, err error)) {
	t.Helper()
	if processed, err := deliver(true); processed || err != errBoom {
		t.Fatalf("failing delivery = %v, %v", processed, err)
	}
	if processed, err := deliver(false); !processed || err != nil {
		t.Fatalf("redelivery = %v, %v; want processed", processed, err)
	}
	if processed, err := deliver(false); processed || err != nil {
		t.Fatalf("duplicate = %v, %v; want skipped", processed, err)
	}
	if got := effectsOf(t, b.db.SQL, "billing"); got[id] != 1 {
		t.Fatalf("effects = %v, want one", got)
	}
}

// seededRand returns a random source whose seed the test logs, to replay a
// failure.
func seededRand(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 0))
}

// queryMap runs a query of two columns, a key and a value, into a map.
func queryMap[K comparable, V any](t *testing.T, db *sql.DB, query string, args ...any) map[K]V {
	t.Helper()
	rows, err := db.Query(query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[K]V{}
	for rows.Next() {
		var k K
		var v V
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// effectsOf returns how many times each event's effect was applied for
// consumer.
func effectsOf(t *testing.T, db *sql.DB, consumer string) map[uuid.UUID]int {
	t.Helper()
	return queryMap[uuid.UUID, int](t, db, `SELECT event_id, count(*) FROM ledger WHERE consumer = $1 GROUP BY event_id`, consumer)
}

// balances returns every account's balance.
func balances(t *testing.T, db *sql.DB) map[string]int64 {
	t.Helper()
	return queryMap[string, int64](t, db, `SELECT id, balance FROM accounts`)
}
