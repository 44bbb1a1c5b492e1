package outboxsql_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// The claim gate and the prune lock are keyed by the table's OID: a relay
// configured with Table{} (found through search_path) and an operator who
// names the schema take the same locks, and another schema's table of the
// same name takes others. Keyed by the name as spelled, a prune blocked
// behind a replay deleted the row the replay had just set pending.
func TestLocksAreTheTablesWhateverItsSpelling(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testkit.NewOutbox(t) // its pool's search_path is its schema
	other := testkit.NewOutbox(t)
	qualified, err := outboxsql.NamesFor(db.Schema, "")
	if err != nil {
		t.Fatal(err)
	}
	bare, err := outboxsql.NamesFor("", "")
	if err != nil {
		t.Fatal(err)
	}
	elsewhere, err := outboxsql.NamesFor(other.Schema, "")
	if err != nil {
		t.Fatal(err)
	}

	// An operator's retry, naming the schema, holds the claim gate.
	op, err := db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Rollback() //nolint:errcheck
	if _, err := op.ExecContext(ctx, qualified.Render(outboxsql.OpsClaimGate)); err != nil {
		t.Fatal(err)
	}
	if _, err := op.ExecContext(ctx, qualified.Render(outboxsql.OpsPruneLock)); err != nil {
		t.Fatal(err)
	}

	// A relay configured without a schema waits for it, and does not prune.
	claim, err := db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer claim.Rollback() //nolint:errcheck
	_, err = claim.ExecContext(ctx, bare.Render(outboxsql.ClaimSettings), outboxsql.ClaimSettingsArgs{
		TxTimeoutArgs: outboxsql.TxTimeoutArgs{Wait: 300 * time.Millisecond, Idle: 300 * time.Millisecond}, Table: bare.Table}.Args()...)
	if err == nil || !strings.Contains(err.Error(), "lock timeout") {
		t.Fatalf("the relay's claim settings with the operator's gate held = %v, want a lock timeout", err)
	}
	var pruned bool
	if err := db.SQL.QueryRowContext(ctx, bare.Render(outboxsql.PruneLock)).Scan(&pruned); err != nil {
		t.Fatal(err)
	}
	if pruned {
		t.Fatal("the relay took the prune lock the operator holds under another spelling of the table")
	}

	// Another schema's outbox table is another lock.
	if err := other.SQL.QueryRowContext(ctx, elsewhere.Render(outboxsql.PruneLock)).Scan(&pruned); err != nil {
		t.Fatal(err)
	}
	if !pruned {
		t.Fatal("another schema's outbox shares the prune lock")
	}
}
