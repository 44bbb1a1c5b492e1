package outboxsql_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/partitions"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// partitioned converts c's outbox into partitions of size ids, with
// partitions created ahead up to upTo ids.
func (c costDB) partitioned(t *testing.T, size, upTo int64) partitions.Table {
	t.Helper()
	ctx := context.Background()
	tbl := partitions.Table{Names: c.names, Schema: c.schema(t), Name: outboxsql.TableNameDefault}
	to := partitions.Timeouts{Lock: time.Second, Statement: time.Minute}
	if err := partitions.Convert(ctx, c.db, tbl, size, to, 3); err != nil {
		t.Fatal(err)
	}
	for maxID := int64(0); maxID <= upTo; maxID += size { // as the relays' rounds would while writers write
		leaves, err := partitions.List(ctx, c.db, c.names)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := partitions.CreateAhead(ctx, c.db, tbl, leaves, maxID, to); err != nil {
			t.Fatal(err)
		}
	}
	return tbl
}

func (c costDB) schema(t *testing.T) string {
	t.Helper()
	var s string
	if err := c.db.QueryRow(`SELECT current_schema()`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func (c costDB) leafNames(t *testing.T) []string {
	t.Helper()
	leaves, err := partitions.List(context.Background(), c.db, c.names)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range leaves {
		out = append(out, l.Name)
	}
	return out
}

// TestPartitionStatementsRun converts an outbox in use, creates partitions
// ahead, and drops the partition past retention while keeping the one a
// dead row holds: every partition statement runs, in order.
func TestPartitionStatementsRun(t *testing.T) {
	// Not parallel: its database is the plan-work tests' (see newCostDB).
	c := newCostDB(t)
	ctx := context.Background()
	c.insert(t, 2500, `'a' || (g % 10)`, "published", "1", "now()", "now() - interval '10 days'", "now() - interval '10 days'")
	c.exec(t, `CREATE TRIGGER keep BEFORE UPDATE ON {{table}} FOR EACH ROW EXECUTE FUNCTION outbox_not_before()`)
	tbl := c.partitioned(t, 1000, 0)
	q := func(name string) string { return `"` + c.schema(t) + `"."` + name + `"` }
	if got, want := c.leafNames(t), []string{q("outbox_p0"), q("outbox_p4000"), q("outbox_default")}; !slices.Equal(got, want) {
		t.Fatalf("partitions %q, want %q", got, want)
	}
	// Ids 2501-5000: the rest of the first partition, the second, and
	// one more, created ahead once the writers passed 4,500.
	c.insert(t, 2000, `'a' || (g % 10)`, "published", "1", "now()", "now() - interval '10 days'", "now() - interval '10 days'")
	leaves, err := partitions.List(ctx, c.db, c.names)
	if err != nil {
		t.Fatal(err)
	}
	to := partitions.Timeouts{Lock: time.Second, Statement: time.Minute}
	if created, err := partitions.CreateAhead(ctx, c.db, tbl, leaves, 4500, to); err != nil || !slices.Equal(created, []string{q("outbox_p5000"), q("outbox_p6000")}) {
		t.Fatalf("CreateAhead = %q, %v", created, err)
	}
	c.insert(t, 500, `'a' || (g % 10)`, "published", "1", "now()", "now() - interval '10 days'", "now() - interval '10 days'")
	c.exec(t, `UPDATE {{table}} SET state = 'dead' WHERE id = 4100`)
	var inDefault int
	if err := c.db.QueryRow(`SELECT count(*) FROM outbox_default`).Scan(&inDefault); err != nil || inDefault != 0 {
		t.Fatalf("%d rows in the default partition, %v", inDefault, err)
	}
	leaves, err = partitions.List(ctx, c.db, c.names)
	if err != nil {
		t.Fatal(err)
	}
	// The floor at 4000: the partitions above are never dropped, however old.
	dropped, kept, err := partitions.Sweep(ctx, c.db, c.names, leaves, 4000, 7*24*time.Hour, to)
	if err != nil || !slices.Equal(dropped, []string{q("outbox_p0")}) || !slices.Equal(kept, []string{q("outbox_default")}) {
		t.Fatalf("Sweep below 4000 = dropped %q, kept %q, %v", dropped, kept, err)
	}
	leaves, err = partitions.List(ctx, c.db, c.names)
	if err != nil {
		t.Fatal(err)
	}
	dropped, kept, err = partitions.Sweep(ctx, c.db, c.names, leaves, 6000, 7*24*time.Hour, to)
	if err != nil || !slices.Equal(dropped, []string{q("outbox_p5000")}) || !slices.Equal(kept, []string{q("outbox_p4000"), q("outbox_default")}) {
		t.Fatalf("Sweep below 6000 = dropped %q, kept %q, %v", dropped, kept, err)
	}
	var n int
	if err := c.db.QueryRow(c.names.Render(`SELECT count(*) FROM {{table}}`)).Scan(&n); err != nil || n != 1000 {
		t.Fatalf("%d rows left, %v; want the 1000 of the partition the dead row keeps", n, err)
	}
}

// TestClaimCostOnManyDrainedPartitions: a claim on a partitioned outbox
// whose drained rows fill ten partitions reads what it reads on an
// unpartitioned one, at sizes 10x apart: the walk of first attempts starts
// at the claim floor, and the partitions below it are pruned when the
// claim runs; the rest of the claim reaches the rows it takes by tuple id
// in the partitions their ids span.
func TestClaimCostOnManyDrainedPartitions(t *testing.T) {
	// Not parallel: see TestClaimCostIsItsBatchWithAnyNumberOfRowsInBackoff.
	const batch = 10
	measure := func(drained int, partitioned bool) map[string]testkit.Work {
		c := newCostDB(t)
		if partitioned {
			c.partitioned(t, int64(drained/10), int64(drained+2*batch))
		}
		c.drain(t, drained, batch)
		if partitioned {
			if n := len(c.leafNames(t)); n < 12 {
				t.Fatalf("%d partitions, want 10 drained, the default and those ahead", n)
			}
		}
		return c.claimWork(t, batch)
	}
	small, large := measure(costSmall, true), measure(costLarge, true)
	testkit.AssertFlat(t, "claim over ten drained partitions", costRatio, small, large)
	testkit.AssertFlat(t, "claim over ten drained partitions against one table", costRatio, measure(costLarge, false), large)
}
