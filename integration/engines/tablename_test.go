package engines_test

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
	"github.com/txoutbox/txoutbox/outboxadmin"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/relaytest"
)

// An outbox under a name of its own ("events", its companions and indexes
// named after it by the migrator) works as "outbox" does, on every engine:
// the relay claims, marks, fails and prunes, and the operators read, retry
// and replay, each statement reaching the table's own indexes (MySQL's
// statements name the index they read).
func TestOutboxUnderAnotherName(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		db := testkit.NewDBOn(t, e)
		table := txoutbox.Table{Name: "events"}
		if e == testkit.Postgres {
			table.Schema = db.Schema
		}
		m, err := migrations.New(db.SQL, migrations.Config{Set: migrations.Outbox, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Up(ctx); err != nil {
			t.Fatalf("migrate %s: %v", table.Name, err)
		}
		w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: table, Dialect: db.Dialect()})
		if err != nil {
			t.Fatal(err)
		}
		events := []txoutbox.Event{event("a", 0), event("b", 0), event("a", 1)}
		testkit.Commit(t, ctx, db.SQL, w, events...)

		pub := relaytest.NewPublisher()
		if err := relaytest.Drain(ctx, db.SQL, pub, relay.Config{Table: table}); err != nil {
			t.Fatalf("drain %s: %v", table.Name, err)
		}
		if n := len(published(pub)); n != len(events) {
			t.Fatalf("published %d events, want %d", n, len(events))
		}

		adm, err := outboxadmin.New(db.SQL, outboxadmin.Config{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if err := adm.CheckSchema(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := adm.Status(ctx)
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		if st.Backlog != 0 || st.Dead != 0 {
			t.Errorf("status after the drain: %+v", st.Stats)
		}
		if _, err := txoutbox.ReadStats(ctx, db.SQL, table); err != nil {
			t.Fatalf("ReadStats: %v", err)
		}
		rows, err := adm.FindEvents(ctx, outboxadmin.Lookup{EventID: events[0].ID})
		if err != nil || len(rows) != 1 {
			t.Fatalf("find event %s: %d rows, %v", events[0].ID, len(rows), err)
		}
		if rows, err = adm.FindEvents(ctx, outboxadmin.Lookup{AggregateID: "a"}); err != nil || len(rows) != 2 {
			t.Fatalf("find aggregate a: %d rows, %v", len(rows), err)
		}
		if _, err := adm.Handovers(ctx); err != nil {
			t.Fatalf("handovers: %v", err)
		}
		if _, err := adm.Lag(ctx); err != nil {
			t.Fatalf("lag: %v", err)
		}

		// A replay returns the published events to pending; made dead, the
		// operators list, count and retry them; a drain publishes them again.
		res, err := adm.Replay(ctx, outboxadmin.ReplayFilter{Since: time.Now().Add(-time.Hour)}, false)
		if err != nil || res.Events != int64(len(events)) {
			t.Fatalf("replay: %+v, %v", res, err)
		}
		q := `UPDATE events SET state = 'dead', attempts = 10, last_error = 'no'`
		if e == testkit.Postgres {
			q = `UPDATE "` + db.Schema + `".events SET state = 'dead', attempts = 10, last_error = 'no'`
		}
		if _, err := db.SQL.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
		dead, err := adm.ListDead(ctx, outboxadmin.Filter{}, 0, 0)
		if err != nil || len(dead) != len(events) {
			t.Fatalf("dead list: %d rows, %v", len(dead), err)
		}
		if n, err := adm.CountDead(ctx, outboxadmin.Filter{AggregateID: "a"}); err != nil || n != 2 {
			t.Fatalf("dead count of aggregate a: %d, %v", n, err)
		}
		if _, err := adm.Retry(ctx, outboxadmin.Filter{All: true}, false); err != nil {
			t.Fatalf("retry: %v", err)
		}
		pub = relaytest.NewPublisher()
		if err := relaytest.Drain(ctx, db.SQL, pub, relay.Config{Table: table}); err != nil {
			t.Fatalf("drain after retry: %v", err)
		}
		if n := len(published(pub)); n != len(events) {
			t.Fatalf("published %d events after the retry, want %d", n, len(events))
		}
		checkOrder(t, pub.Messages())

		// Retention prunes the published events.
		cfg := relay.Config{Table: table, Retention: time.Millisecond, PruneInterval: 10 * time.Millisecond, PollInterval: 10 * time.Millisecond}
		r, err := relay.New(db.SQL, relaytest.NewPublisher(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		testkit.WaitFor(t, 30*time.Second, "the published events pruned", func() bool {
			rows, err := adm.FindEvents(ctx, outboxadmin.Lookup{AggregateID: "a"})
			return err == nil && len(rows) == 0
		})
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}
