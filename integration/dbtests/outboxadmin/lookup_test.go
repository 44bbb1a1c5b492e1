package outboxadmin_test

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin"
)

// FindEvents finds unpublished and dead events anywhere, and published ones
// within LookupWindow of the newest rows.
func TestFindEventsAndCounts(t *testing.T) {
	t.Parallel()
	db, adm, w := setup(t, outboxadmin.Config{LookupWindow: 3})
	ctx := context.Background()
	before, err := adm.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var events []txoutbox.Event
	for _, agg := range []string{"a", "a", "a", "b", "b", "b", "b"} { // ids 1-3 a, 4-7 b
		e, _ := txoutbox.NewEvent("orders", "order", agg, "order.changed", nil)
		events = append(events, e)
	}
	testkit.Commit(t, ctx, db.SQL, w, events...)
	for _, q := range []string{
		`UPDATE outbox SET state = 'published', published_at = now() WHERE id IN (1, 4, 5)`,
		`UPDATE outbox SET state = 'dead', created_at = now() - interval '2 hours' WHERE id IN (2, 6)`,
	} {
		if _, err := db.SQL.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(rows []outboxadmin.Row) []int64 {
		var out []int64
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return out
	}
	// a: 3 pending, 2 dead, 1 published beyond the window of 3 (rows 5-7).
	rows, err := adm.FindEvents(ctx, outboxadmin.Lookup{AggregateID: "a"})
	if err != nil || len(rows) != 2 || rows[0].ID != 3 || rows[1].ID != 2 {
		t.Errorf("FindEvents(a) = %v, %v; want 3, 2 (1 is published and older than the window)", ids(rows), err)
	}
	// b: 7 pending, 6 dead, 5 published within the window, 4 beyond.
	rows, err = adm.FindEvents(ctx, outboxadmin.Lookup{AggregateID: "b", Limit: 2})
	if err != nil || len(rows) != 2 || rows[0].ID != 7 || rows[1].ID != 6 {
		t.Errorf("FindEvents(b, limit 2) = %v, %v; want 7, 6", ids(rows), err)
	}
	rows, err = adm.FindEvents(ctx, outboxadmin.Lookup{EventID: events[4].ID})
	if err != nil || len(rows) != 1 || rows[0].ID != 5 || rows[0].State != "published" {
		t.Errorf("FindEvents(event of row 5) = %v, %v", ids(rows), err)
	}
	if _, err := adm.FindEvents(ctx, outboxadmin.Lookup{}); err == nil {
		t.Error("FindEvents without a key succeeded")
	}
	// Until narrows the dead letters by creation time.
	for _, tc := range []struct {
		f    outboxadmin.Filter
		want int64
	}{
		{outboxadmin.Filter{}, 2},
		{outboxadmin.Filter{Until: time.Now().Add(-time.Hour)}, 2},
		{outboxadmin.Filter{Since: time.Now().Add(-time.Hour)}, 0},
		{outboxadmin.Filter{AggregateID: "b"}, 1},
	} {
		if n, err := adm.CountDead(ctx, tc.f); err != nil || n != tc.want {
			t.Errorf("CountDead(%+v) = %d, %v; want %d", tc.f, n, err, tc.want)
		}
	}
	after, err := adm.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Backlog != 2 || after.Dead != 2 || after.LastID != 7 || after.Lag <= 0 || !after.At.After(before.At) {
		t.Errorf("Snapshot = %+v", after)
	}
	// 7 written, backlog +2, dead +2: 3 published.
	before.At = after.At.Add(-3 * time.Second)
	if r := outboxadmin.PublishRate(before, after); r != 1 {
		t.Errorf("PublishRate = %v, want 1/s", r)
	}
	if r := outboxadmin.PublishRate(after, before); r != 0 {
		t.Errorf("PublishRate backwards = %v, want 0", r)
	}
}

// A shard holding rows another live relay still has claimed is in
// handover; once the claim ends, or its relay is gone, it is not.
func TestStatusHandovers(t *testing.T) {
	t.Parallel()
	db, adm, w := setup(t, outboxadmin.Config{})
	ctx := context.Background()
	e, _ := txoutbox.NewEvent("orders", "order", "o-1", "order.placed", nil)
	testkit.Commit(t, ctx, db.SQL, w, e)
	var shard int
	for _, q := range []string{
		`INSERT INTO outbox_relays (id, name) VALUES ('old#1', 'old'), ('new#1', 'new')`,
		`UPDATE outbox_shards SET owner = 'new#1' WHERE shard = (SELECT shard FROM outbox WHERE id = 1)`,
		`UPDATE outbox SET state = 'claimed', lease_owner = 'old#1', lease_expires_at = now() + interval '1 minute'`,
	} {
		if _, err := db.SQL.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.SQL.QueryRow(`SELECT shard FROM outbox WHERE id = 1`).Scan(&shard); err != nil {
		t.Fatal(err)
	}
	st, err := adm.Status(ctx)
	if err != nil || len(st.Handovers) != 1 || st.Handovers[0] != shard {
		t.Fatalf("Handovers = %v, %v; want [%d]", st.Handovers, err, shard)
	}
	if _, err := db.SQL.Exec(`DELETE FROM outbox_relays WHERE id = 'old#1'`); err != nil {
		t.Fatal(err)
	}
	if st, err := adm.Status(ctx); err != nil || len(st.Handovers) != 0 {
		t.Fatalf("Handovers after the old relay left = %v, %v; want none", st.Handovers, err)
	}
}
