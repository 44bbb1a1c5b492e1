package outboxadmin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin"
)

// While a WAL relay's slot may stream the table (a pgoutput slot named as
// Config.Slot, or as a publication of the table), retry and replay refuse
// and change nothing: the stream never carries the UPDATE that returns a
// row to pending, so the WAL relay would not publish the row and its
// cleanup would remove it. Another slot, even beside another publication
// of the table (a CDC tool's), does not stop them.
func TestRetryAndReplayRefuseWhileAWALSlotStreams(t *testing.T) {
	t.Parallel()
	db, adm, w := setup(t, outboxadmin.Config{})
	ctx := context.Background()
	var events []txoutbox.Event
	for _, agg := range []string{"a", "b"} {
		e, _ := txoutbox.NewEvent("orders", "order", agg, "order.placed", nil)
		events = append(events, e)
	}
	testkit.Commit(t, ctx, db.SQL, w, events...)
	slot := db.Table().Schema + "_wal"
	for _, q := range []string{
		`UPDATE outbox SET state = 'dead', last_error = 'refused' WHERE id = 1`,
		`UPDATE outbox SET state = 'published', published_at = now() WHERE id = 2`,
		`SELECT pg_create_logical_replication_slot('` + slot + `', 'pgoutput')`,
	} {
		if _, err := db.SQL.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	dropSlot := func() {
		_, _ = db.SQL.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
	}
	t.Cleanup(func() {
		dropSlot()
		_, _ = db.SQL.Exec(`DROP PUBLICATION IF EXISTS ` + slot + `, cdc_` + slot)
	})
	since := outboxadmin.ReplayFilter{Since: time.Now().Add(-time.Hour)}
	if _, err := adm.Retry(ctx, outboxadmin.Filter{All: true}, true); err != nil {
		t.Fatalf("retry with a slot but no publication of the table: %v", err)
	}
	if _, err := db.SQL.Exec(`CREATE PUBLICATION cdc_` + slot + ` FOR TABLE ` + db.Table().String()); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Retry(ctx, outboxadmin.Filter{All: true}, true); err != nil {
		t.Fatalf("retry with a slot and a publication of another name: %v", err)
	}
	named, err := outboxadmin.New(db.SQL, outboxadmin.Config{Table: db.Table(), Slot: slot})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := named.Retry(ctx, outboxadmin.Filter{All: true}, true); !errors.Is(err, outboxadmin.ErrWALStreamed) {
		t.Fatalf("retry with the configured slot present: %v, want ErrWALStreamed", err)
	}
	if _, err := db.SQL.Exec(`CREATE PUBLICATION ` + slot + ` FOR TABLE ` + db.Table().String()); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		if _, err := adm.Retry(ctx, outboxadmin.Filter{All: true}, dry); !errors.Is(err, outboxadmin.ErrWALStreamed) {
			t.Errorf("retry (dry run %v) while streamed: %v, want ErrWALStreamed", dry, err)
		}
		if _, err := adm.Replay(ctx, since, dry); !errors.Is(err, outboxadmin.ErrWALStreamed) {
			t.Errorf("replay (dry run %v) while streamed: %v, want ErrWALStreamed", dry, err)
		}
	}
	if n := count(t, db, `SELECT count(*) FROM outbox WHERE id = 1 AND state = 'dead' OR id = 2 AND state = 'published'`); n != 2 {
		t.Fatalf("refused retry and replay changed rows: %d of 2 as they were", n)
	}
	dropSlot()
	if retried, err := adm.Retry(ctx, outboxadmin.Filter{All: true}, false); err != nil || len(retried) != 1 {
		t.Fatalf("retry after the slot is gone: %v, %v", retried, err)
	}
	if res, err := adm.Replay(ctx, since, false); err != nil || res.Events != 1 {
		t.Fatalf("replay after the slot is gone: %+v, %v", res, err)
	}
	if n := count(t, db, `SELECT count(*) FROM outbox WHERE state = 'pending'`); n != 2 {
		t.Fatalf("%d rows pending after retry and replay, want 2", n)
	}
}
