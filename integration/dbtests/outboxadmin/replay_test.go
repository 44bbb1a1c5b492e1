package outboxadmin_test

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin"
)

// A replay resets each aggregate's rows in one transaction, however small
// ReplayBatch is, so a relay never publishes a newer event of the aggregate
// between two parts of its replay.
func TestReplayResetsEachAggregateAtOnce(t *testing.T) {
	t.Parallel()
	db, adm, w := setup(t, outboxadmin.Config{ReplayBatch: 2})
	ctx := context.Background()
	var events []txoutbox.Event
	for range 3 { // k: 1 3 5, m: 2 4 6, n: 7
		for _, agg := range []string{"k", "m"} {
			e, _ := txoutbox.NewEvent("orders", "order", agg, "order.changed", nil)
			events = append(events, e)
		}
	}
	e, _ := txoutbox.NewEvent("payments", "order", "n", "order.changed", nil)
	testkit.Commit(t, ctx, db.SQL, w, append(events, e)...)
	// Which transaction reset each row, recorded by a trigger.
	for _, q := range []string{
		`UPDATE outbox SET state = 'published', published_at = now()`,
		`CREATE TABLE reset_by (id bigint, xid xid8)`,
		`CREATE FUNCTION record_reset() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN INSERT INTO reset_by VALUES (NEW.id, pg_current_xact_id()); RETURN NEW; END $$`,
		`CREATE TRIGGER record_reset AFTER UPDATE ON outbox FOR EACH ROW WHEN (NEW.state = 'pending') EXECUTE FUNCTION record_reset()`,
	} {
		if _, err := db.SQL.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	dry, err := adm.Replay(ctx, outboxadmin.ReplayFilter{Since: time.Now().Add(-time.Hour)}, true)
	if err != nil || dry.Events != 7 || count(t, db, `SELECT count(*) FROM outbox WHERE state = 'pending'`) != 0 {
		t.Fatalf("dry run = %+v, %v; want 7 events and nothing changed", dry, err)
	}
	res, err := adm.Replay(ctx, outboxadmin.ReplayFilter{Since: time.Now().Add(-time.Hour)}, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 7 || res.FirstID != 1 || res.LastID != 7 || len(res.Topics) != 2 || res.Topics[0].Events != 6 {
		t.Fatalf("replay = %+v", res)
	}
	if n := count(t, db, `SELECT count(DISTINCT xid) FROM reset_by r JOIN outbox o USING (id) GROUP BY o.aggregate_id ORDER BY 1 DESC LIMIT 1`); n != 1 {
		t.Fatalf("an aggregate's rows were reset by %d transactions, want 1", n)
	}
	if n := count(t, db, `SELECT count(DISTINCT xid) FROM reset_by`); n < 2 {
		t.Fatalf("%d transactions for 7 rows with ReplayBatch 2, want several", n)
	}
}

func count(t *testing.T, db *testkit.DB, query string) int {
	t.Helper()
	var n int
	if err := db.SQL.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
