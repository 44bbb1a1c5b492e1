package entest_test

import (
	"context"
	"database/sql"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/txoutbox/internal/entest"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// This test binary does not import entest/runtime, which installs the
// mixin's hooks: ent refuses the mutation rather than skip the outbox.
func TestMissingRuntimeImportFailsMutations(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	sqldb, err := sql.Open("pgx", db.URL)
	if err != nil {
		t.Fatal(err)
	}
	client := entest.NewClient(entest.Driver(entsql.OpenDB(dialect.Postgres, sqldb)))
	defer client.Close()
	ctx := context.Background()
	tx, err := client.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	_, err = tx.Order.Create().SetTotal(1).Save(ctx)
	want := "ent: uninitialized hook (forgotten import ent/runtime?)"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
}
