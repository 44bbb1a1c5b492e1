package outboxsql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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

// claimLow finds Low as a relay's floor round does (ClaimLow).
func (c costDB) claimLow(t *testing.T) int64 {
	t.Helper()
	leaves, err := partitions.List(context.Background(), c.db, c.names)
	if err != nil {
		t.Fatal(err)
	}
	var floor int64
	if err := c.db.QueryRow(c.names.Render(outboxsql.ClaimFloorRead)).Scan(&floor); err != nil {
		t.Fatal(err)
	}
	low := floor
	var below []outboxsql.PartitionVars
	for _, l := range leaves {
		switch {
		case l.Bound.Default || !l.Bound.HasTo:
		case l.Bound.To <= floor:
			below = append(below, outboxsql.PartitionVars{Partition: l.Name, From: max(l.Bound.From, 0)})
		case l.Bound.From <= floor:
			low = min(low, max(l.Bound.From, 0))
		}
	}
	if len(below) > 0 {
		tx, err := c.db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback() //nolint:errcheck // read-only
		if _, err := tx.Exec(settings(outboxsql.WalkSettings)); err != nil {
			t.Fatal(err)
		}
		var first sql.NullInt64
		if err := tx.QueryRow(outboxsql.RenderClaimLow(c.names, below)).Scan(&first); err != nil {
			t.Fatal(err)
		}
		if first.Valid {
			low = min(low, first.Int64)
		}
	}
	return low
}

// claimedAggregates runs a claim of up to limit rows with Low low under
// the claim's settings and returns the aggregates of the rows it took.
func (c costDB) claimedAggregates(t *testing.T, limit int, low int64) []string {
	t.Helper()
	tx, err := c.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // committed below
	if _, err := tx.Exec(c.names.Render(settings(outboxsql.ClaimSettings))); err != nil {
		t.Fatal(err)
	}
	args := outboxsql.ClaimArgs{Owner: "me", Limit: limit, Lease: time.Minute, Shards: allShards(), Low: low}.Args()
	rows, err := tx.Query(c.names.Render(outboxsql.Claim), args...)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var skip sql.RawBytes
		var agg string
		d := make([]any, 12)
		for i := range d {
			d[i] = &skip
		}
		d[4] = &agg
		if err := rows.Scan(d...); err != nil {
			t.Fatal(err)
		}
		out = append(out, agg)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// partitionScans is how many scans of the outbox's partitions a claim of
// limit rows with Low low runs under the generic plan the relay uses: the
// scans PostgreSQL opens (and locks the indexes of) when the statement
// starts, and closes when it ends. Pruned when the statement starts, a
// partition's scans are not in the plan at all.
func (c costDB) partitionScans(t *testing.T, limit int, low int64) (scans int, buffers int64) {
	t.Helper()
	tx, err := c.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // only rolled back
	if _, err := tx.Exec(c.names.Render(settings(outboxsql.ClaimSettings))); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("PREPARE claim_scans AS " + c.names.Render(outboxsql.Claim)); err != nil {
		t.Fatal(err)
	}
	a := outboxsql.ClaimArgs{Owner: "me", Limit: limit, Lease: time.Minute, Shards: allShards(), Low: low}.Args()
	exec := fmt.Sprintf("EXECUTE claim_scans('%s', %d, '%s', '%s', %d, %d)", a[0], a[1], a[2], a[3], a[4], a[5])
	var out string
	if err := tx.QueryRow("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + exec).Scan(&out); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("DEALLOCATE claim_scans"); err != nil {
		t.Fatal(err)
	}
	var plans []map[string]any
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("read the plan: %v", err)
	}
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if r, ok := n["Relation Name"].(string); ok && r != outboxsql.TableNameDefault && strings.HasPrefix(r, outboxsql.TableNameDefault+"_") &&
			!strings.HasSuffix(r, "_relays") && !strings.HasSuffix(r, "_claim_floor") {
			scans++
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				walk(k.(map[string]any))
			}
		}
	}
	top := plans[0]["Plan"].(map[string]any)
	walk(top)
	return scans, int64(top["Shared Hit Blocks"].(float64) + top["Shared Read Blocks"].(float64))
}

// TestClaimCostIsFlatInTheDrainedPartitions: with the Low a relay's floor
// round finds (ClaimLow), a claim leaves the drained partitions out when it
// starts: each one costs it one probe of its retry index (the check that
// Low still holds), where without Low every part of the claim opened a scan
// of every partition.
func TestClaimCostIsFlatInTheDrainedPartitions(t *testing.T) {
	// Not parallel: see TestClaimCostIsItsBatchWithAnyNumberOfRowsInBackoff.
	const (
		batch = 10
		size  = 500
	)
	measure := func(drained int) (with, without int, withBuffers int64) {
		c := newCostDB(t)
		c.partitioned(t, size, int64(drained*size+2*batch))
		c.drain(t, drained*size, batch)
		c.exec(t, `VACUUM ANALYZE {{table}}`)
		low := c.claimLow(t)
		if want := int64(drained * size); low != want {
			t.Fatalf("Low %d with %d drained partitions, want %d: the bound of the floor's partition", low, drained, want)
		}
		with, withBuffers = c.partitionScans(t, batch, low)
		without, _ = c.partitionScans(t, batch, 0)
		if got := c.claimedAggregates(t, batch, low); len(got) != batch {
			t.Fatalf("claimed %d rows with Low %d, want %d", len(got), low, batch)
		}
		return with, without, withBuffers
	}
	w10, wo10, b10 := measure(10)
	w40, wo40, b40 := measure(40)
	t.Logf("partition scans: %d with Low, %d without, at 10 drained partitions; %d and %d at 40", w10, wo10, w40, wo40)
	t.Logf("buffers with Low: %d at 10 drained partitions, %d at 40", b10, b40)
	if w40-w10 > 30 {
		t.Errorf("30 more drained partitions cost the claim %d more partition scans, more than the one probe each", w40-w10)
	}
	if float64(b40) > costRatio*float64(b10) {
		t.Errorf("claim with Low: %d buffers at 40 drained partitions, over %dx the %d at 10", b40, costRatio, b10)
	}
	if wo40-wo10 < 4*30 {
		t.Errorf("without Low, 30 more drained partitions cost only %d more scans: the test no longer measures what Low saves", wo40-wo10)
	}
}

// TestClaimLowKeepsOrderAcrossPartitions: an aggregate's row in backoff in
// an old partition holds back its later rows in the newest one. ClaimLow
// keeps that partition in (its retry), and a Low above it, stale, makes the
// claim take nothing rather than the later rows.
func TestClaimLowKeepsOrderAcrossPartitions(t *testing.T) {
	const size = 100
	c := newCostDB(t)
	c.partitioned(t, size, 1000)
	c.exec(t, `INSERT INTO {{relays}} (id, name) VALUES ('me', 'me')`)
	c.insert(t, 1000, `'old-' || g`, "published", "0", "now()", "now()", "now()")
	// Row 350, in partition 300-399, failed and is in backoff.
	c.exec(t, `UPDATE {{table}} SET state = 'pending', published_at = NULL, aggregate_id = 'a', attempts = 1,
        retry_at = now() + interval '1 hour', next_attempt_at = now() + interval '1 hour' WHERE id = 350`)
	c.insert(t, 5, `'a'`, "pending", "0", "now()", "now()", "NULL")
	c.insert(t, 5, `'b-' || g`, "pending", "0", "now()", "now()", "NULL")
	c.exec(t, `VACUUM ANALYZE {{table}}`)
	if floor := c.raiseFloor(t); floor != 1001 {
		t.Fatalf("claim floor %d, want 1001", floor)
	}
	low := c.claimLow(t)
	if low > 300 || low == 0 {
		t.Fatalf("Low %d, want the bound of the retry's partition, 300 (0 would prune nothing)", low)
	}
	if stale := c.claimedAggregates(t, 20, 1000); len(stale) != 0 {
		t.Fatalf("a claim with a stale Low (1000, above the row in backoff) took %q; want nothing", stale)
	}
	want := []string{"b-1", "b-2", "b-3", "b-4", "b-5"}
	if got := c.claimedAggregates(t, 20, low); !slices.Equal(got, want) {
		t.Fatalf("claimed %q with Low %d, want %q: a's rows wait behind its row in backoff", got, low, want)
	}
}
