package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, engine testkit.Engine) {
		e := newOpsOn(t, engine)

		var empty statusOutput
		e.runJSON(t, &empty, "status")
		if empty.Backlog != 0 || empty.LagSeconds != 0 || empty.Dead != 0 || len(empty.Relays) != 0 || len(empty.UnownedShards) != 256 || empty.WALSlot != nil {
			t.Fatalf("empty outbox status = %+v", empty)
		}

		e.write(t, "orders", "o-1", "order.placed")
		e.write(t, "orders", "o-2", "order.placed")
		e.writeDead(t, "payments", "p-1", "payment.failed")
		now := time.Now().UTC()
		e.exec(t, `UPDATE outbox SET created_at = $1 WHERE state = 'pending'`, now.Add(-10*time.Minute))
		e.exec(t, `INSERT INTO outbox_relays (id, host, started_at, heartbeat_at) VALUES ('relay-a', 'host-a', $1, $2)`, now, now)
		e.exec(t, `INSERT INTO outbox_relays (id, host, started_at, heartbeat_at) VALUES ('relay-b', 'host-b', $1, $2)`, now, now.Add(-time.Minute))
		e.exec(t, `UPDATE outbox_shards SET owner = 'relay-a' WHERE shard < 10 OR shard = 12`)
		e.exec(t, `UPDATE outbox_shards SET owner = 'relay-b' WHERE shard BETWEEN 20 AND 29`)

		var st statusOutput
		e.runJSON(t, &st, "status")
		if st.Backlog != 2 || st.Dead != 1 || st.LagSeconds < 590 || st.LagSeconds > 900 {
			t.Errorf("totals = backlog %d dead %d lag %.0fs, want 2, 1, ~600s", st.Backlog, st.Dead, st.LagSeconds)
		}
		// MySQL has no per-topic figures (docs/mysql.md).
		if e.mysql() && len(st.Topics) != 0 || !e.mysql() && (len(st.Topics) != 2 || st.Topics[0].Topic != "orders" || st.Topics[0].Backlog != 2 || st.Topics[0].Dead != 0 ||
			st.Topics[1].Topic != "payments" || st.Topics[1].Backlog != 0 || st.Topics[1].Dead != 1) {
			t.Errorf("topics = %+v", st.Topics)
		}
		if len(st.Relays) != 2 || !st.Relays[0].Alive || st.Relays[0].ID != "relay-a" || len(st.Relays[0].Shards) != 11 ||
			st.Relays[1].Alive || len(st.Relays[1].Shards) != 10 {
			t.Errorf("relays = %+v", st.Relays)
		}
		// Free shards and the stale relay's shards have no live owner.
		if len(st.UnownedShards) != 256-11 || st.UnownedShards[0] != 10 {
			t.Errorf("unowned = %d shards starting %v", len(st.UnownedShards), st.UnownedShards[:1])
		}

		code, out, errOut := e.run(t, "status")
		flat := strings.Join(strings.Fields(out), " ")
		wants := []string{"backlog 2 lag 10m", "dead 1", "scheduled 0", "relays: 1 alive",
			"relay-a host-a alive", "0-9, 12 (11)", "unowned shards: 10-11, 13-255 (245)"}
		if !e.mysql() {
			wants = append(wants, "orders 2 10m", "s 0 0 payments", "payments 0 0s 1 0")
		} else if strings.Contains(out, "TOPIC") {
			t.Errorf("status output on MySQL has a topic table:\n%s", out)
		}
		for _, want := range wants {
			if !strings.Contains(flat, want) {
				t.Errorf("status output lacks %q:\n%s", want, out)
			}
		}
		// Its heartbeat was a minute old when written, and older by the time
		// status ran: a second more on a loaded machine.
		if stale := regexp.MustCompile(`relay-b host-b stale 1m[0-9]+s ago 20-29 \(10\)`); !stale.MatchString(flat) {
			t.Errorf("status output lacks relay-b, stale about a minute:\n%s", out)
		}
		if code != 0 {
			t.Fatalf("status: exit %d, %s", code, errOut)
		}
		// A longer window counts relay-b alive.
		e.runJSON(t, &st, "status", "--stale-after", "5m")
		if !st.Relays[1].Alive || len(st.UnownedShards) != 256-21 {
			t.Errorf("with --stale-after 5m: relays %+v, %d unowned", st.Relays, len(st.UnownedShards))
		}

		// A live relay still holding a row of a shard it does not own: the
		// shard is in handover.
		e.exec(t, `UPDATE outbox SET lease_owner = $1, lease_expires_at = $2 WHERE aggregate_id = 'o-1'`, engine.LeaseOwner("relay-a"), time.Now().UTC().Add(time.Hour))
		var shard int
		if err := e.db.SQL.QueryRow(`SELECT shard FROM outbox WHERE aggregate_id = 'o-1'`).Scan(&shard); err != nil {
			t.Fatal(err)
		}
		e.exec(t, `UPDATE outbox_shards SET owner = 'relay-b' WHERE shard = $1`, shard)
		e.runJSON(t, &st, "status")
		if len(st.HandoverShards) != 1 || st.HandoverShards[0] != shard {
			t.Errorf("handover shards = %v, want o-1's, %d", st.HandoverShards, shard)
		}
		if _, out, _ := e.run(t, "status"); !strings.Contains(out, "shards in handover: ") {
			t.Errorf("status output lacks the shards in handover:\n%s", out)
		}

		// The health check.
		code, _, errOut = e.run(t, "status", "--max-lag", "1m")
		if code != exitLagExceeded || !strings.Contains(errOut, "exceeds --max-lag 1m0s") {
			t.Errorf("--max-lag 1m with a 10m lag: exit %d, stderr %q; want %d", code, errOut, exitLagExceeded)
		}
		code, out, _ = e.run(t, "status", "--max-lag", "1m", "--json")
		if code != exitLagExceeded || !strings.Contains(out, `"max_lag_exceeded": true`) {
			t.Errorf("--max-lag 1m --json: exit %d, %s", code, out)
		}
		if code, _, errOut = e.run(t, "status", "--max-lag", "1h"); code != 0 {
			t.Errorf("--max-lag 1h with a 10m lag: exit %d, %q", code, errOut)
		}
	})
}

// Beyond the exact counts' cap, status says the backlog and the dead count
// are estimates (~N) and a topic's count a lower bound (≥N), in text and
// JSON.
func TestStatusBeyondTheCaps(t *testing.T) {
	testkit.Long(t, "status past the count caps (210,000 rows)")
	t.Parallel()
	e := newOps(t)
	const n = txoutbox.StatsExactMax + 5_000
	e.exec(t, `INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, state, attempts)
    SELECT gen_random_uuid(), 'orders', 'o-' || g, 'e', '{}', 'pending', 0 FROM generate_series(1, `+strconv.Itoa(n)+`) g`)
	e.exec(t, `INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, state, attempts)
    VALUES (gen_random_uuid(), 'small', 's-1', 'e', '{}', 'pending', 0)`)
	e.exec(t, `INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, state, attempts)
    SELECT gen_random_uuid(), 'payments', 'p-' || g, 'e', '{}', 'dead', 10 FROM generate_series(1, `+strconv.Itoa(n)+`) g`)
	e.exec(t, `ANALYZE outbox`) // the dead count's estimate: PostgreSQL's statistics

	var st statusOutput
	e.runJSON(t, &st, "status")
	// The backlog is one id range: its estimate is exact here.
	if st.Backlog != n+1 || !st.BacklogEstimated || !st.DeadEstimated || st.Dead < 0.9*n || st.Dead > 1.1*n {
		t.Errorf("totals = backlog %d (estimated %v), dead %d (estimated %v); want %d and about %d, estimated",
			st.Backlog, st.BacklogEstimated, st.Dead, st.DeadEstimated, n+1, n)
	}
	if len(st.Topics) != 3 || st.Topics[0].Backlog != txoutbox.TopicStatsMax || !st.Topics[0].BacklogAtLeast || st.Topics[0].DeadAtLeast ||
		st.Topics[1].Dead != txoutbox.TopicStatsMax || !st.Topics[1].DeadAtLeast ||
		st.Topics[2].Backlog != 1 || st.Topics[2].BacklogAtLeast {
		t.Errorf("topics = %+v", st.Topics)
	}
	code, out, errOut := e.run(t, "status")
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"backlog ~" + strconv.Itoa(n+1), "dead ~", "orders ≥10000", "payments 0 0s ≥10000", "small 1 ", "~N: an estimate"} {
		if !strings.Contains(flat, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	if code != 0 {
		t.Fatalf("status: exit %d, %s", code, errOut)
	}
}

// Scheduled events are shown apart: neither backlog nor lag.
func TestStatusShowsScheduledEvents(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	e.write(t, "orders", "o-1", "order.placed")
	e.write(t, "reminders", "o-1", "order.remind")
	e.exec(t, `UPDATE outbox SET not_before = '2999-01-01T00:00:00Z', retry_at = '2999-01-01T00:00:00Z',
        next_attempt_at = '2999-01-01T00:00:00Z', created_at = now() - interval '1 day' WHERE topic = 'reminders'`)
	var st statusOutput
	e.runJSON(t, &st, "status")
	if st.Backlog != 1 || st.Scheduled != 1 || st.NextScheduled == nil || st.NextScheduled.Year() != 2999 || st.LagSeconds > 600 ||
		len(st.Topics) != 2 || st.Topics[1].Topic != "reminders" || st.Topics[1].Backlog != 0 || st.Topics[1].Scheduled != 1 {
		t.Errorf("status = %+v, want backlog 1, 1 scheduled (next due in 2999) in reminders, no lag from it", st)
	}
	code, out, errOut := e.run(t, "status")
	flat := strings.Join(strings.Fields(out), " ")
	if code != 0 || !strings.Contains(flat, "backlog 1 ") || !strings.Contains(flat, "scheduled 1 (next due 2999-01-01T00:00:00Z)") ||
		!strings.Contains(flat, "reminders 0 0s 0 1") {
		t.Errorf("status: exit %d, %s%s", code, out, errOut)
	}
}

// Events held behind a delayed event of their aggregate wait by design:
// status shows their lag, and apart from it the due lag, which leaves
// them out and is what --max-lag checks, for one table and with
// --schemas; an event the relay may publish now counts again.
func TestStatusMaxLagLeavesOutEventsHeldBehindADelayedOne(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	ev, err := txoutbox.NewEvent("reminders", "order", "o-1", "order.reminder", map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	ev.NotBefore = time.Now().Add(time.Hour)
	testkit.Commit(t, context.Background(), e.db.SQL, e.writer, ev)
	e.write(t, "orders", "o-1", "order.paid") // held behind the reminder
	e.exec(t, `UPDATE outbox SET created_at = now() - interval '10 minutes' WHERE not_before IS NULL`)

	var st statusOutput
	e.runJSON(t, &st, "status", "--max-lag", "1m")
	if st.Backlog != 1 || st.Scheduled != 1 || st.LagSeconds < 590 || st.DueLagSeconds != 0 || st.MaxLagExceeded {
		t.Errorf("status = backlog %d scheduled %d lag %.0fs due lag %.0fs exceeded %v; want 1, 1, ~600s, 0s, false",
			st.Backlog, st.Scheduled, st.LagSeconds, st.DueLagSeconds, st.MaxLagExceeded)
	}
	code, out, errOut := e.run(t, "status", "--max-lag", "1m")
	flat := strings.Join(strings.Fields(out), " ")
	if code != 0 || !strings.Contains(flat, "lag 10m") || !strings.Contains(flat, "due lag 0s (leaves out events held behind delayed ones; --max-lag checks it)") {
		t.Errorf("status --max-lag 1m with only a held event late: exit %d, stderr %q, output:\n%s", code, errOut, out)
	}
	tables := []string{"status", "--database-url", e.db.URL, "--schemas", e.db.Schema, "--max-lag", "1m"}
	if code, out, errOut := outbox(t, tables...); code != 0 {
		t.Errorf("status --schemas --max-lag 1m with only a held event late: exit %d, stderr %q, output:\n%s", code, errOut, out)
	}

	e.write(t, "orders", "o-2", "order.placed")
	e.exec(t, `UPDATE outbox SET created_at = now() - interval '5 minutes' WHERE aggregate_id = 'o-2'`)
	code, _, errOut = e.run(t, "status", "--max-lag", "1m")
	if code != exitLagExceeded || !strings.Contains(errOut, "due lag 5m") {
		t.Errorf("status --max-lag 1m with an event free to publish 5m late: exit %d, stderr %q; want %d", code, errOut, exitLagExceeded)
	}
	code, out, errOut = outbox(t, append(tables, "--json")...)
	if code != exitLagExceeded || !strings.Contains(out, `"due_lag_seconds": 3`) || !strings.Contains(errOut, "due lag 5m") {
		t.Errorf("status --schemas --max-lag 1m --json with an event free to publish 5m late: exit %d, stderr %q, output:\n%s", code, errOut, out)
	}
}
