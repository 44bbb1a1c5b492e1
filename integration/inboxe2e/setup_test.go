package inboxe2e

import (
	"context"
	"database/sql"
	"testing"

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

// effectsOf returns how many times each event's effect was applied for
// consumer.
func effectsOf(t *testing.T, db *sql.DB, consumer string) map[uuid.UUID]int {
	t.Helper()
	rows, err := db.Query(`SELECT event_id, count(*) FROM ledger WHERE consumer = $1 GROUP BY event_id`, consumer)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[uuid.UUID]int{}
	for rows.Next() {
		var id uuid.UUID
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// balances returns every account's balance.
func balances(t *testing.T, db *sql.DB) map[string]int64 {
	t.Helper()
	rows, err := db.Query(`SELECT id, balance FROM accounts`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var b int64
		if err := rows.Scan(&id, &b); err != nil {
			t.Fatal(err)
		}
		out[id] = b
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
