package engines_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
	"github.com/txoutbox/txoutbox/outboxadmin"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/relaytest"
)

// The operators' API (outboxadmin) on each engine, through its exported
// methods: the same test bodies on PostgreSQL and on MySQL/MariaDB, with
// what differs by database (no per-topic figures, no lock listing, no WAL
// slot on MySQL; published events found at any age there) said where it
// is asserted.

// adminCase is a migrated outbox of the test's own and an Admin on it.
type adminCase struct {
	e   testkit.Engine
	db  *testkit.DB
	adm *outboxadmin.Admin
	w   *txoutbox.Writer
}

func newAdminCase(t *testing.T, e testkit.Engine, cfg outboxadmin.Config) *adminCase {
	t.Helper()
	db := testkit.NewOutboxOn(t, e)
	cfg.Table = db.Table()
	adm, err := outboxadmin.New(db.SQL, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.CheckSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &adminCase{e: e, db: db, adm: adm, w: db.Writer(t)}
}

func (c *adminCase) mysql() bool { return c.e.Dialect == txoutbox.MySQL }

// exec runs a statement written with $n placeholders on either engine.
func (c *adminCase) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := c.db.SQL.Exec(c.db.Q(query), args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// write commits an event and returns its row id.
func (c *adminCase) write(t *testing.T, topic, aggregate, typ string) (int64, txoutbox.Event) {
	t.Helper()
	ev, err := txoutbox.NewEvent(topic, "order", aggregate, typ, map[string]string{"aggregate": aggregate})
	if err != nil {
		t.Fatal(err)
	}
	ev.Headers = map[string]string{"tenant": "acme"}
	testkit.Commit(t, context.Background(), c.db.SQL, c.w, ev)
	return c.rowID(t, ev.ID.String()), ev
}

func (c *adminCase) rowID(t *testing.T, eventID string) int64 {
	t.Helper()
	var id int64
	if err := c.db.SQL.QueryRow(c.db.Q(`SELECT id FROM outbox WHERE event_id = $1`), eventID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// kill makes rows dead as a relay does after MaxAttempts.
func (c *adminCase) kill(t *testing.T, ids ...int64) {
	t.Helper()
	for _, id := range ids {
		c.exec(t, `UPDATE outbox SET state = 'dead', attempts = 10, last_error = 'publish: broker said no' WHERE id = $1`, id)
	}
}

// publish marks rows published at a time.
func (c *adminCase) publish(t *testing.T, at time.Time, ids ...int64) {
	t.Helper()
	for _, id := range ids {
		c.exec(t, `UPDATE outbox SET state = 'published', published_at = $1 WHERE id = $2`, at.UTC(), id)
	}
}

func (c *adminCase) state(t *testing.T, id int64) string {
	t.Helper()
	r, err := c.adm.Event(context.Background(), id)
	if errors.Is(err, outboxadmin.ErrNotFound) {
		return "gone"
	}
	if err != nil {
		t.Fatal(err)
	}
	return r.State
}

func rowIDsOf(rows []outboxadmin.Row) []int64 {
	out := []int64{}
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

// Status, Fleet, Lag, Snapshot and Handovers: the backlog, the dead and
// the scheduled events, the lags, the relays alive and stale with their
// shards, the shards no live relay owns and those in handover. On MySQL
// the per-topic figures and the lock listing are unsupported (an error
// matching errors.ErrUnsupported), and there is never a WAL slot.
func TestAdminStatus(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		c := newAdminCase(t, e, outboxadmin.Config{})
		ctx := context.Background()
		st, err := c.adm.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Backlog != 0 || st.Lag != 0 || st.Dead != 0 || len(st.Relays) != 0 || len(st.Unowned) != 256 || st.Slot != nil {
			t.Fatalf("an empty outbox's status = %+v", st)
		}

		o1, _ := c.write(t, "orders", "o-1", "order.placed")
		c.write(t, "orders", "o-2", "order.placed")
		dead, _ := c.write(t, "payments", "p-1", "payment.failed")
		c.kill(t, dead)
		c.exec(t, `UPDATE outbox SET created_at = $1 WHERE state = 'pending'`, time.Now().UTC().Add(-10*time.Minute))
		later := time.Now().Add(2 * time.Hour)
		ev, _ := txoutbox.NewEvent("reminders", "order", "r-1", "order.remind", map[string]string{})
		ev.NotBefore = later
		testkit.Commit(t, ctx, c.db.SQL, c.w, ev)
		now := time.Now().UTC()
		c.exec(t, `INSERT INTO outbox_relays (id, host, started_at, heartbeat_at) VALUES ($1, $2, $3, $4)`, "relay-a", "host-a", now, now)
		c.exec(t, `INSERT INTO outbox_relays (id, host, started_at, heartbeat_at) VALUES ($1, $2, $3, $4)`, "relay-b", "host-b", now, now.Add(-time.Minute))
		c.exec(t, `UPDATE outbox_shards SET owner = 'relay-a' WHERE shard < 10 OR shard = 12`)
		c.exec(t, `UPDATE outbox_shards SET owner = 'relay-b' WHERE shard BETWEEN 20 AND 29`)

		st, err = c.adm.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Backlog != 2 || st.Dead != 1 || st.Scheduled != 1 || st.BacklogEstimated || st.DeadEstimated {
			t.Errorf("status: backlog %d, dead %d, scheduled %d; want 2, 1, 1, exact", st.Backlog, st.Dead, st.Scheduled)
		}
		near(t, "Lag", st.Lag, 10*time.Minute, time.Minute)
		near(t, "DueLag", st.DueLag, 10*time.Minute, time.Minute)
		near(t, "NextScheduled - now", time.Until(st.NextScheduled), 2*time.Hour, time.Minute)
		if len(st.Relays) != 2 || st.Relays[0].ID != "relay-a" || !st.Relays[0].Alive || st.Relays[0].Host != "host-a" ||
			len(st.Relays[0].Shards) != 11 || st.Relays[1].Alive || len(st.Relays[1].Shards) != 10 {
			t.Errorf("relays = %+v", st.Relays)
		}
		near(t, "relay-b's heartbeat age", st.Relays[1].HeartbeatAge, time.Minute, 30*time.Second)
		if len(st.Unowned) != 256-11 || st.Unowned[0] != 10 || st.Slot != nil {
			t.Errorf("unowned: %d shards from %v; slot %+v", len(st.Unowned), st.Unowned[:1], st.Slot)
		}
		if c.mysql() {
			if len(st.Topics) != 0 {
				t.Errorf("topics on MySQL = %+v, want none", st.Topics)
			}
			if _, err := c.adm.TopicStats(ctx); !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("TopicStats on MySQL = %v, want errors.ErrUnsupported", err)
			}
			if _, err := c.adm.TopicSnapshot(ctx); !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("TopicSnapshot on MySQL = %v, want errors.ErrUnsupported", err)
			}
			if _, err := c.adm.Locks(ctx); !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("Locks on MySQL = %v, want errors.ErrUnsupported", err)
			}
		} else {
			if len(st.Topics) != 3 || st.Topics[0].Topic != "orders" || st.Topics[0].Backlog != 2 || st.Topics[1].Dead != 1 || st.Topics[2].Scheduled != 1 {
				t.Errorf("topics = %+v", st.Topics)
			}
			if _, err := c.adm.Locks(ctx); err != nil {
				t.Errorf("Locks = %v", err)
			}
		}

		lag, err := c.adm.Lag(ctx)
		if err != nil {
			t.Fatal(err)
		}
		near(t, "Lag()", lag, 10*time.Minute, time.Minute)
		snap, err := c.adm.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Backlog != 2 || snap.Dead != 1 || snap.Scheduled != 1 || snap.LastID != c.rowID(t, ev.ID.String()) || time.Since(snap.At).Abs() > time.Minute {
			t.Errorf("snapshot = %+v", snap)
		}
		near(t, "Snapshot's DueLag", snap.DueLag, 10*time.Minute, time.Minute)

		// relay-a still holds o-1's row under a live lease, and relay-b
		// owns its shard now: a handover.
		c.exec(t, `UPDATE outbox SET lease_owner = $1, lease_expires_at = $2 WHERE id = $3`, c.e.LeaseOwner("relay-a"), now.Add(time.Hour), o1)
		var shard int
		if err := c.db.SQL.QueryRow(c.db.Q(`SELECT shard FROM outbox WHERE id = $1`), o1).Scan(&shard); err != nil {
			t.Fatal(err)
		}
		c.exec(t, `UPDATE outbox_shards SET owner = 'relay-b' WHERE shard = $1`, shard)
		if got, err := c.adm.Handovers(ctx); err != nil || !slices.Equal(got, []int{shard}) {
			t.Errorf("handovers = %v, %v; want [%d]", got, err, shard)
		}
		if r, err := c.adm.Event(ctx, o1); err != nil || r.State != "claimed" || r.LeaseOwner != "relay-a" {
			t.Errorf("the row relay-a holds: %+v, %v; want claimed by relay-a", r, err)
		}
	})
}

// The dead letters: listed by each filter and paged, counted, read one by
// one with their payload, retried and dropped by ids or filters, with dry
// runs that change nothing; a retry reports the later events already in
// flight, and refuses ids that are not dead.
func TestAdminDeadLetters(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		c := newAdminCase(t, e, outboxadmin.Config{})
		ctx := context.Background()
		a1, ev1 := c.write(t, "orders", "o-1", "order.placed")
		a2, _ := c.write(t, "orders", "o-2", "order.cancelled")
		b1, _ := c.write(t, "payments", "o-1", "payment.failed")
		old, _ := c.write(t, "orders", "o-3", "order.placed")
		alive, _ := c.write(t, "orders", "o-1", "order.placed") // pending: never listed
		c.kill(t, a1, a2, b1, old)
		c.exec(t, `UPDATE outbox SET created_at = $1 WHERE id = $2`, time.Now().UTC().Add(-72*time.Hour), old)

		for _, tc := range []struct {
			f    outboxadmin.Filter
			want []int64
		}{
			{outboxadmin.Filter{}, []int64{a1, a2, b1, old}},
			{outboxadmin.Filter{Topic: "orders"}, []int64{a1, a2, old}},
			{outboxadmin.Filter{AggregateID: "o-1"}, []int64{a1, b1}},
			{outboxadmin.Filter{Type: "order.placed"}, []int64{a1, old}},
			{outboxadmin.Filter{Since: time.Now().Add(-24 * time.Hour)}, []int64{a1, a2, b1}},
			{outboxadmin.Filter{Until: time.Now().Add(-24 * time.Hour)}, []int64{old}},
			{outboxadmin.Filter{Topic: "orders", AggregateID: "o-1"}, []int64{a1}},
			{outboxadmin.Filter{IDs: []int64{b1, alive, a1}}, []int64{a1, b1}},
			{outboxadmin.Filter{Topic: "nope"}, []int64{}},
		} {
			rows, err := c.adm.ListDead(ctx, tc.f, 0, 0)
			if err != nil || !slices.Equal(rowIDsOf(rows), tc.want) {
				t.Errorf("ListDead(%+v) = %v, %v; want %v", tc.f, rowIDsOf(rows), err, tc.want)
			}
			if n, err := c.adm.CountDead(ctx, tc.f); err != nil || n != int64(len(tc.want)) {
				t.Errorf("CountDead(%+v) = %d, %v; want %d", tc.f, n, err, len(tc.want))
			}
		}
		// Keyset paging.
		var paged []int64
		for after := int64(0); ; {
			rows, err := c.adm.ListDead(ctx, outboxadmin.Filter{}, after, 3)
			if err != nil {
				t.Fatal(err)
			}
			paged = append(paged, rowIDsOf(rows)...)
			if len(rows) < 3 {
				break
			}
			after = rows[len(rows)-1].ID
		}
		if !slices.Equal(paged, []int64{a1, a2, b1, old}) {
			t.Errorf("pages of 3: %v", paged)
		}

		r, err := c.adm.Event(ctx, a1)
		if err != nil {
			t.Fatal(err)
		}
		var payload map[string]string
		if err := json.Unmarshal(r.Payload, &payload); err != nil || payload["aggregate"] != "o-1" || r.PayloadBytes != len(r.Payload) ||
			r.State != "dead" || r.Attempts != 10 || r.LastError != "publish: broker said no" || r.Headers["tenant"] != "acme" ||
			r.EventID != ev1.ID || r.Topic != "orders" || r.AggregateID != "o-1" || r.Type != "order.placed" || r.ContentType != "application/json" ||
			r.PublishedAt != nil || r.LeaseOwner != "" || time.Since(r.CreatedAt).Abs() > time.Minute {
			t.Errorf("Event(%d) = %+v (payload %s)", a1, r, r.Payload)
		}
		if got := c.state(t, alive); got != "pending" {
			t.Errorf("Event of a pending row: state %s", got)
		}
		if _, err := c.adm.Event(ctx, alive+1000); !errors.Is(err, outboxadmin.ErrNotFound) {
			t.Errorf("Event of no row = %v, want ErrNotFound", err)
		}

		// A dry run returns what would be retried and changes nothing.
		retried, err := c.adm.Retry(ctx, outboxadmin.Filter{Topic: "payments"}, true)
		if err != nil || len(retried) != 1 || retried[0].ID != b1 || c.state(t, b1) != "dead" {
			t.Fatalf("Retry dry run = %+v, %v; want b1, still dead", retried, err)
		}
		// An id that is not dead fails the whole retry.
		if _, err := c.adm.Retry(ctx, outboxadmin.Filter{IDs: []int64{a1, alive}}, false); !errors.Is(err, outboxadmin.ErrNotDead) {
			t.Fatalf("Retry of a pending row = %v, want ErrNotDead", err)
		}
		if c.state(t, a1) != "dead" {
			t.Fatal("a refused retry changed a row")
		}
		// o-1's later event is in flight, claimed by a relay: it
		// overtakes the retried one.
		c.exec(t, `UPDATE outbox SET lease_owner = $1, lease_expires_at = $2 WHERE id = $3`, c.e.LeaseOwner("relay-x"), time.Now().UTC().Add(time.Hour), alive)
		retried, err = c.adm.Retry(ctx, outboxadmin.Filter{IDs: []int64{a1}}, false)
		if err != nil || len(retried) != 1 || retried[0].ID != a1 || !slices.Equal(retried[0].Overtaken, []int64{alive}) {
			t.Fatalf("Retry(a1) = %+v, %v; want a1 overtaken by %d", retried, err, alive)
		}
		r, err = c.adm.Event(ctx, a1)
		if err != nil || r.State != "pending" || r.Attempts != 0 || r.LastError != "publish: broker said no" || r.LeaseOwner != "" ||
			time.Until(r.NextAttemptAt) > time.Minute {
			t.Fatalf("the retried row: %+v, %v; want pending now, no attempts, its last error kept", r, err)
		}

		dropped, err := c.adm.Drop(ctx, outboxadmin.Filter{Topic: "orders", AggregateID: "o-2"}, true)
		if err != nil || !slices.Equal(rowIDsOf(dropped), []int64{a2}) || c.state(t, a2) != "dead" {
			t.Fatalf("Drop dry run = %v, %v; want a2, still there", rowIDsOf(dropped), err)
		}
		dropped, err = c.adm.Drop(ctx, outboxadmin.Filter{Since: time.Now().Add(-24 * time.Hour)}, false)
		if err != nil || !slices.Equal(rowIDsOf(dropped), []int64{a2, b1}) || c.state(t, a2) != "gone" || c.state(t, b1) != "gone" {
			t.Fatalf("Drop(since 24h) = %v, %v; want a2 and b1 gone", rowIDsOf(dropped), err)
		}
		if _, err := c.adm.Drop(ctx, outboxadmin.Filter{}, false); !errors.Is(err, outboxadmin.ErrNoSelection) {
			t.Fatalf("Drop of a zero Filter = %v, want ErrNoSelection", err)
		}
		dropped, err = c.adm.Drop(ctx, outboxadmin.Filter{All: true}, false)
		if err != nil || !slices.Equal(rowIDsOf(dropped), []int64{old}) {
			t.Fatalf("Drop(all) = %v, %v; want the old one", rowIDsOf(dropped), err)
		}
		if n, err := c.adm.CountDead(ctx, outboxadmin.Filter{}); err != nil || n != 0 {
			t.Fatalf("CountDead after dropping them all = %d, %v", n, err)
		}
	})
}

// More ids than one MySQL statement binds (outboxsql.MySQLOpsMaxIDs) are
// listed, counted, retried, dropped and replayed in one call: on MySQL
// in several statements of one transaction, on PostgreSQL as one array.
func TestAdminManyIDs(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		c := newAdminCase(t, e, outboxadmin.Config{})
		ctx := context.Background()
		const n = outboxsql.MySQLOpsMaxIDs + 50
		events := make([]txoutbox.Event, n)
		for i := range events {
			events[i] = event("agg", i)
		}
		testkit.Commit(t, ctx, c.db.SQL, c.w, events...)
		c.exec(t, `UPDATE outbox SET state = 'dead', attempts = 10, last_error = 'refused'`)
		ids := mustColumn[int64](t, c.db.SQL, `SELECT id FROM outbox ORDER BY id`)
		// The ids given in another order, one of them twice.
		given := append(slices.Clone(ids[n/2:]), ids[:n/2+1]...)
		f := outboxadmin.Filter{IDs: given}
		listed, err := c.adm.ListDead(ctx, f, ids[10], outboxadmin.DeadPageMax)
		if err != nil || !slices.Equal(rowIDsOf(listed), ids[11:]) {
			t.Fatalf("ListDead of %d ids after the 11th: %d rows, %v; want the %d after it in id order", n, len(listed), err, n-11)
		}
		if got, err := c.adm.CountDead(ctx, f); err != nil || got != n {
			t.Fatalf("CountDead of %d ids = %d, %v", n, got, err)
		}
		retried, err := c.adm.Retry(ctx, f, false)
		if err != nil || len(retried) != n || retried[0].ID != ids[0] || retried[n-1].ID != ids[n-1] {
			t.Fatalf("Retry of %d ids: %d retried, %v", n, len(retried), err)
		}
		if got, err := c.adm.CountDead(ctx, outboxadmin.Filter{}); err != nil || got != 0 {
			t.Fatalf("dead after the retry: %d, %v", got, err)
		}
		c.exec(t, `UPDATE outbox SET state = 'published', published_at = $1`, time.Now().UTC())
		res, err := c.adm.Replay(ctx, outboxadmin.ReplayFilter{Since: time.Now().Add(-time.Hour), AggregateID: "agg"}, false)
		if err != nil || res.Events != n || res.FirstID != ids[0] || res.LastID != ids[n-1] {
			t.Fatalf("Replay of one aggregate of %d rows = %+v, %v", n, res, err)
		}
		c.exec(t, `UPDATE outbox SET state = 'dead'`)
		dropped, err := c.adm.Drop(ctx, f, false)
		if err != nil || len(dropped) != n {
			t.Fatalf("Drop of %d ids: %d dropped, %v", n, len(dropped), err)
		}
		var left int
		if err := c.db.SQL.QueryRow(`SELECT count(*) FROM outbox`).Scan(&left); err != nil || left != 0 {
			t.Fatalf("%d rows left after the drop (%v)", left, err)
		}
	})
}

// Replay returns published events to pending, selected by when they were
// published, their topic and aggregate, with dry runs that change
// nothing; the relay then publishes them again, in order, with their
// event ids.
func TestAdminReplay(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		c := newAdminCase(t, e, outboxadmin.Config{ReplayBatch: 1})
		ctx := context.Background()
		a1, ev1 := c.write(t, "orders", "o-1", "order.placed")
		b1, evb := c.write(t, "orders", "o-2", "order.placed")
		a2, ev2 := c.write(t, "orders", "o-1", "order.paid")
		d, _ := c.write(t, "orders", "o-1", "order.lost")
		c.publish(t, time.Now(), a1, a2)
		c.publish(t, time.Now().Add(-48*time.Hour), b1)
		c.kill(t, d)

		if _, err := c.adm.Replay(ctx, outboxadmin.ReplayFilter{Topic: "orders"}, false); !errors.Is(err, outboxadmin.ErrNoSince) {
			t.Fatalf("Replay without Since = %v, want ErrNoSince", err)
		}
		hour := time.Now().Add(-time.Hour)
		dry, err := c.adm.Replay(ctx, outboxadmin.ReplayFilter{Since: hour}, true)
		if err != nil || dry.Events != 2 || dry.FirstID != a1 || dry.LastID != a2 ||
			len(dry.Topics) != 1 || dry.Topics[0] != (outboxadmin.TopicCount{Topic: "orders", Events: 2}) || c.state(t, a1) != "published" {
			t.Fatalf("Replay dry run = %+v, %v; want a1 and a2, nothing changed", dry, err)
		}
		if none, err := c.adm.Replay(ctx, outboxadmin.ReplayFilter{Since: hour, Topic: "payments"}, false); err != nil || none.Events != 0 {
			t.Fatalf("Replay of another topic = %+v, %v", none, err)
		}
		res, err := c.adm.Replay(ctx, outboxadmin.ReplayFilter{Since: hour, AggregateID: "o-1"}, false)
		if err != nil || res.Events != 2 || res.FirstID != a1 || res.LastID != a2 {
			t.Fatalf("Replay of o-1 = %+v, %v", res, err)
		}
		for _, id := range []int64{a1, a2} {
			r, err := c.adm.Event(ctx, id)
			if err != nil || r.State != "pending" || r.PublishedAt != nil || r.Attempts != 0 || r.LeaseOwner != "" {
				t.Fatalf("replayed row %d: %+v, %v", id, r, err)
			}
		}
		if c.state(t, b1) != "published" || c.state(t, d) != "dead" {
			t.Fatal("replay changed a row it did not select")
		}
		// Two aggregates, one transaction each (ReplayBatch 1).
		res, err = c.adm.Replay(ctx, outboxadmin.ReplayFilter{Since: time.Now().Add(-72 * time.Hour)}, false)
		if err != nil || res.Events != 1 || res.FirstID != b1 {
			t.Fatalf("Replay since 3 days = %+v, %v; want b1 (the others are pending)", res, err)
		}
		pub := relaytest.NewPublisher()
		if err := relaytest.Drain(ctx, c.db.SQL, pub, relay.Config{Table: c.db.Table()}); err != nil {
			t.Fatal(err)
		}
		got := map[string][]string{} // per aggregate, in order
		for _, m := range pub.Messages() {
			got[m.Key] = append(got[m.Key], m.UUID)
		}
		if !slices.Equal(got["o-1"], []string{ev1.ID.String(), ev2.ID.String()}) || !slices.Equal(got["o-2"], []string{evb.ID.String()}) || len(got) != 2 {
			t.Fatalf("published again: %v, want o-1's two in order and o-2's", got)
		}
	})
}

// FindEvents finds an event by its event id, and an aggregate's events,
// in every state, newest first, up to its limit.
func TestAdminFindEvents(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		c := newAdminCase(t, e, outboxadmin.Config{})
		ctx := context.Background()
		p, evp := c.write(t, "orders", "a", "order.placed")
		d, evd := c.write(t, "orders", "a", "order.paid")
		c.write(t, "orders", "b", "order.placed")
		q, evq := c.write(t, "orders", "a", "order.sent")
		c.publish(t, time.Now(), p)
		c.kill(t, d)
		for _, tc := range []struct {
			ev    txoutbox.Event
			id    int64
			state string
		}{{evp, p, "published"}, {evd, d, "dead"}, {evq, q, "pending"}} {
			rows, err := c.adm.FindEvents(ctx, outboxadmin.Lookup{EventID: tc.ev.ID})
			if err != nil || len(rows) != 1 || rows[0].ID != tc.id || rows[0].State != tc.state || rows[0].Payload != nil {
				t.Errorf("FindEvents(event %s) = %+v, %v; want row %d, %s, without its payload", tc.ev.ID, rows, err, tc.id, tc.state)
			}
		}
		if rows, err := c.adm.FindEvents(ctx, outboxadmin.Lookup{EventID: uuid.New()}); err != nil || len(rows) != 0 {
			t.Errorf("FindEvents(unknown event) = %v, %v", rowIDsOf(rows), err)
		}
		if rows, err := c.adm.FindEvents(ctx, outboxadmin.Lookup{AggregateID: "a"}); err != nil || !slices.Equal(rowIDsOf(rows), []int64{q, d, p}) {
			t.Errorf("FindEvents(a) = %v, %v; want %v", rowIDsOf(rows), err, []int64{q, d, p})
		}
		if rows, err := c.adm.FindEvents(ctx, outboxadmin.Lookup{AggregateID: "a", Limit: 2}); err != nil || !slices.Equal(rowIDsOf(rows), []int64{q, d}) {
			t.Errorf("FindEvents(a, limit 2) = %v, %v", rowIDsOf(rows), err)
		}
	})
}

// What an Admin needs of its table and its config: a table not migrated
// fails CheckSchema (and every method) with migrations.ErrSchemaTooOld;
// on MySQL a Slot or a Table.Schema is refused by New.
func TestAdminChecks(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		ctx := context.Background()
		db := testkit.NewDBOn(t, e)
		adm, err := outboxadmin.New(db.SQL, outboxadmin.Config{Table: db.Table()})
		if err != nil {
			t.Fatal(err)
		}
		if err := adm.CheckSchema(ctx); !errors.Is(err, migrations.ErrSchemaTooOld) {
			t.Errorf("CheckSchema of no table = %v, want ErrSchemaTooOld", err)
		}
		if _, err := adm.Status(ctx); !errors.Is(err, migrations.ErrSchemaTooOld) {
			t.Errorf("Status of no table = %v, want ErrSchemaTooOld", err)
		}
		for _, cfg := range []outboxadmin.Config{
			{Table: db.Table(), Slot: "txoutbox"},
			{Table: txoutbox.Table{Schema: "elsewhere"}},
		} {
			_, err := outboxadmin.New(db.SQL, cfg)
			if e.Dialect == txoutbox.MySQL && !errors.Is(err, outboxadmin.ErrInvalidConfig) {
				t.Errorf("New(%+v) on MySQL = %v, want ErrInvalidConfig", cfg, err)
			}
			if e.Dialect != txoutbox.MySQL && err != nil {
				t.Errorf("New(%+v) = %v", cfg, err)
			}
		}
	})
}

// Retry and Replay take the claim gate: while a claim holds it, they
// wait for it, and give up after StatementTimeout (the statement's time
// limit or its lock wait, whichever ends first), changing nothing; once
// it is free they run.
func TestAdminRetryAndReplayTakeTheClaimGate(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		c := newAdminCase(t, e, outboxadmin.Config{StatementTimeout: time.Second})
		ctx := context.Background()
		dead, _ := c.write(t, "orders", "o-1", "order.placed")
		c.kill(t, dead)
		done, _ := c.write(t, "orders", "o-2", "order.placed")
		c.publish(t, time.Now(), done)

		names, err := outboxsql.NamesForDialect(outboxsql.Dialect(e.Dialect), c.db.Table().Schema, "")
		if err != nil {
			t.Fatal(err)
		}
		gate := names.Render(`SELECT pg_advisory_xact_lock_shared({{claimkey}})`) // as the claim takes it (outboxsql.Claim)
		if c.mysql() {
			gate = names.Render(outboxsql.MySQLClaimGate)
		}
		claim, err := c.db.SQL.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		defer claim.Rollback()
		rows, err := claim.QueryContext(ctx, gate)
		if err != nil {
			t.Fatal(err)
		}
		rows.Close()

		if _, err := c.adm.Retry(ctx, outboxadmin.Filter{IDs: []int64{dead}}, false); err == nil || !strings.Contains(err.Error(), "hold claims back") {
			t.Fatalf("Retry while a claim holds the gate = %v, want it to give up holding claims back", err)
		}
		if _, err := c.adm.Replay(ctx, outboxadmin.ReplayFilter{Since: time.Now().Add(-time.Hour)}, false); err == nil || !strings.Contains(err.Error(), "hold claims back") {
			t.Fatalf("Replay while a claim holds the gate = %v, want it to give up holding claims back", err)
		}
		// A dry run takes no gate.
		if got, err := c.adm.Retry(ctx, outboxadmin.Filter{IDs: []int64{dead}}, true); err != nil || len(got) != 1 {
			t.Fatalf("Retry dry run while a claim holds the gate = %v, %v", got, err)
		}
		if c.state(t, dead) != "dead" || c.state(t, done) != "published" {
			t.Fatal("a retry or replay that gave up changed rows")
		}
		if err := claim.Rollback(); err != nil {
			t.Fatal(err)
		}
		if got, err := c.adm.Retry(ctx, outboxadmin.Filter{IDs: []int64{dead}}, false); err != nil || len(got) != 1 {
			t.Fatalf("Retry once the gate is free = %v, %v", got, err)
		}
		if res, err := c.adm.Replay(ctx, outboxadmin.ReplayFilter{Since: time.Now().Add(-time.Hour)}, false); err != nil || res.Events != 1 {
			t.Fatalf("Replay once the gate is free = %+v, %v", res, err)
		}
	})
}

// An Admin gives its connections back to the pool, which the application
// may share, with the session's settings as they were: its limits are its
// transactions' (PostgreSQL), or set back once it is done (MySQL).
func TestAdminLeavesThePoolsSessionsAlone(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		c := newAdminCase(t, e, outboxadmin.Config{StatementTimeout: 7 * time.Second})
		ctx := context.Background()
		dead, _ := c.write(t, "orders", "o-1", "order.placed")
		c.kill(t, dead)
		c.db.SQL.SetMaxOpenConns(1) // the connection the Admin uses is the one read below
		if _, err := c.adm.Retry(ctx, outboxadmin.Filter{All: true}, false); err != nil {
			t.Fatal(err)
		}
		if _, err := c.adm.Status(ctx); err != nil {
			t.Fatal(err)
		}
		asDefault := `SELECT bool_and(setting = reset_val) FROM pg_settings
			WHERE name IN ('statement_timeout', 'lock_timeout', 'idle_in_transaction_session_timeout')`
		if c.mysql() { // MariaDB's statement time limit: the tests' server
			asDefault = `SELECT @@SESSION.innodb_lock_wait_timeout = @@GLOBAL.innodb_lock_wait_timeout
				AND @@SESSION.wait_timeout = @@GLOBAL.wait_timeout AND @@SESSION.max_statement_time = @@GLOBAL.max_statement_time`
		}
		var same bool
		if err := c.db.SQL.QueryRow(asDefault).Scan(&same); err != nil || !same {
			t.Fatalf("the session's limits after the Admin used it: as the server's defaults %v (%v), want true", same, err)
		}
	})
}

// Retries and replays while two relays drain the outbox and events are
// written keep each aggregate's order:
//   - a retried event goes out before every later event of its aggregate
//     that was not in flight when the retry committed (Retried.Overtaken
//     lists those that were);
//   - a replayed aggregate's events go out again in id order, before
//     every event of the aggregate written after the replay;
//   - the first deliveries of every event that never died are in order
//     per aggregate, and every event is delivered.
//
// Aggregates r0..r3 have events the broker refuses once (they die:
// MaxAttempts 1) and are retried; p0..p3 are replayed once each.
func TestAdminRetryAndReplayWhileRelaysDrain(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		c := newAdminCase(t, e, outboxadmin.Config{StatementTimeout: 10 * time.Second})
		c.db.SQL.SetMaxIdleConns(20)
		ctx := context.Background()
		pub := relaytest.NewPublisher()
		// Slow publishes keep rows in flight while the operators work.
		pub.OnPublish(func(string, *message.Message) { time.Sleep(2 * time.Millisecond) })
		for i := range 2 {
			startRelay(t, c.db, pub, fmt.Sprintf("relay-%d", i))
		}
		retryAggs := []string{"r0", "r1", "r2", "r3"}
		replayAggs := []string{"p0", "p1", "p2", "p3"}
		aggs := append(slices.Clone(retryAggs), replayAggs...)
		const perAggregate = 60

		var (
			mu      sync.Mutex
			written = map[string]int64{} // event id -> row id
			poison  = map[string]bool{}  // event ids refused once
		)
		writerDone := make(chan struct{})
		go func() {
			defer close(writerDone)
			for n := range perAggregate {
				for _, agg := range aggs {
					ev := event(agg, n)
					if agg[0] == 'r' && n%6 == 2 {
						pub.Fail(relaytest.Failure{EventID: ev.ID.String(), Times: 1, Permanent: true})
						mu.Lock()
						poison[ev.ID.String()] = true
						mu.Unlock()
					}
					id, err := commitOne(ctx, c.db, c.w, ev)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					written[ev.ID.String()] = id
					mu.Unlock()
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()

		type retryOp struct {
			start, end int // the publisher's log length before and after
			retried    []outboxadmin.Retried
		}
		type replayOp struct {
			agg        string
			start, end int
			lastID     int64 // the highest row id once it returned
			res        outboxadmin.ReplayResult
		}
		var (
			retries []retryOp
			replays []replayOp
		)
		since := time.Now().Add(-time.Hour)
		for k := 0; ; k++ {
			select {
			case <-writerDone:
			default:
				if k%3 == 2 && len(replays) < len(replayAggs) {
					op := replayOp{agg: replayAggs[len(replays)], start: len(pub.Messages())}
					// A deadlock's victim is run again by the library
					// (outboxadmin's inTx): no error reaches the operator.
					res, err := c.adm.Replay(ctx, outboxadmin.ReplayFilter{Since: since, AggregateID: op.agg}, false)
					if err != nil {
						t.Fatalf("replay %s: %v", op.agg, err)
					}
					op.end, op.res = len(pub.Messages()), res
					snap, err := c.adm.Snapshot(ctx)
					if err != nil {
						t.Fatal(err)
					}
					op.lastID = snap.LastID
					replays = append(replays, op)
				} else {
					op := retryOp{start: len(pub.Messages())}
					retried, err := c.adm.Retry(ctx, outboxadmin.Filter{All: true}, false)
					if err != nil {
						t.Fatalf("retry: %v", err)
					}
					op.end, op.retried = len(pub.Messages()), retried
					retries = append(retries, op)
				}
				time.Sleep(40 * time.Millisecond)
				continue
			}
			break
		}
		// The last dead events, retried until none is left.
		testkit.WaitFor(t, 30*time.Second, "every event delivered", func() bool {
			op := retryOp{start: len(pub.Messages())}
			retried, err := c.adm.Retry(ctx, outboxadmin.Filter{All: true}, false)
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			op.end, op.retried = len(pub.Messages()), retried
			retries = append(retries, op)
			mu.Lock()
			defer mu.Unlock()
			got := published(pub)
			for id := range written {
				if !got[id] {
					return false
				}
			}
			return len(written) == len(aggs)*perAggregate
		})
		if len(replays) != len(replayAggs) {
			t.Fatalf("%d replays ran while the writer wrote, want %d", len(replays), len(replayAggs))
		}

		log := pub.Messages()
		rowOf := func(m relaytest.Published) int64 {
			mu.Lock()
			defer mu.Unlock()
			return written[m.UUID]
		}
		first := map[int64]int{} // row id -> position of its first delivery
		for i, m := range log {
			if _, ok := first[rowOf(m)]; !ok {
				first[rowOf(m)] = i
			}
		}
		aggOf := map[int64]string{}
		for _, m := range log {
			aggOf[rowOf(m)] = m.Key
		}

		// First deliveries in order per aggregate, but for the events
		// that died (retried after later events of theirs, by design).
		last := map[string]int64{}
		for i, m := range log {
			id := rowOf(m)
			mu.Lock()
			died := poison[m.UUID]
			mu.Unlock()
			if first[id] != i || died {
				continue
			}
			if id < last[m.Key] {
				t.Errorf("aggregate %s: row %d first delivered after row %d", m.Key, id, last[m.Key])
			}
			last[m.Key] = id
		}

		retriedOnce := 0
		for _, op := range retries {
			for _, r := range op.retried {
				retriedOnce++
				for id, agg := range aggOf {
					if agg != r.AggregateID || id <= r.ID || slices.Contains(r.Overtaken, id) || first[id] < op.end {
						continue
					}
					if first[id] < first[r.ID] {
						t.Errorf("aggregate %s: row %d, pending when row %d was retried, delivered first", agg, id, r.ID)
					}
				}
			}
		}
		mu.Lock()
		poisoned := len(poison)
		mu.Unlock()
		if retriedOnce < poisoned {
			t.Errorf("%d retries of the %d events that died", retriedOnce, poisoned)
		}

		for _, op := range replays {
			// The aggregate's deliveries after the replay began: the
			// rows it reset, each delivered again, in id order, and the
			// rows written after it returned only after the last of them.
			var again []int64
			lastAgain := -1
			for i := op.start; i < len(log); i++ {
				id := rowOf(log[i])
				if aggOf[id] != op.agg || first[id] == i {
					continue
				}
				again = append(again, id)
				lastAgain = i
			}
			if int64(len(again)) != op.res.Events || !slices.IsSorted(again) {
				t.Errorf("replay of %s (%d events, %d..%d): delivered again %v, want each once in id order", op.agg, op.res.Events, op.res.FirstID, op.res.LastID, again)
			}
			for id, agg := range aggOf {
				if agg == op.agg && id > op.lastID && first[id] < lastAgain {
					t.Errorf("replay of %s: row %d, written after it, delivered before the replayed rows", op.agg, id)
				}
			}
		}
		t.Logf("%d events, %d delivered, %d retry calls (%d events retried), %d replays", len(aggs)*perAggregate, len(log), len(retries), retriedOnce, len(replays))
	})
}

// commitOne commits ev in a transaction of its own and returns its row
// id.
func commitOne(ctx context.Context, db *testkit.DB, w *txoutbox.Writer, ev txoutbox.Event) (int64, error) {
	tx, err := db.SQL.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if err := w.Write(ctx, tx, ev); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	var id int64
	err = db.SQL.QueryRowContext(ctx, db.Q(`SELECT id FROM outbox WHERE event_id = $1`), ev.ID.String()).Scan(&id)
	return id, err
}

// startRelay runs a relay on db's outbox, paced for tests, with
// MaxAttempts 1 (an event the broker refuses for its own fault dies at
// once), until the test ends (relayBundle.start, on either engine).
func startRelay(t *testing.T, db *testkit.DB, pub *relaytest.Publisher, id string) {
	t.Helper()
	cfg := relay.Config{
		Table: db.Table(), ID: id, MaxAttempts: 1,
		PollInterval: 20 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, StaleAfter: 2 * time.Second,
		LeaseDuration: 10 * time.Second, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		FlushInterval: 5 * time.Millisecond, StatementTimeout: 5 * time.Second, LockTimeout: 5 * time.Second,
		Logger: testLogger(t),
	}
	(&relayBundle{t: t, db: db.SQL}).start(t, pub, cfg)
}
