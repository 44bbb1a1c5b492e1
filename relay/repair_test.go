package relay

// Rows no relay writes: in backoff by next_attempt_at alone, with retry_at
// at its default (a dump older than schema version 5 restored into this
// one, an insert by hand, a relay of version 3 or 4 failing them) or
// passed. The claim reads them as due and cannot take them: a batch of
// them filled its window and held back every other aggregate.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// foreign inserts n rows, each of an aggregate of its own (prefix0 to
// prefixN-1), as a restore of an older dump or an insert by hand leaves them:
// failed (attempts 3), in backoff until next (an SQL expression) by
// next_attempt_at, and with retry_at (an SQL expression, or "" for its
// default).
func (b *internalBundle) foreign(t *testing.T, n int, prefix, next, retryAt string) {
	t.Helper()
	cols, vals := "", ""
	if retryAt != "" {
		cols, vals = ", retry_at", ", "+retryAt
	}
	b.exec(t, `INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload, attempts, last_error, next_attempt_at`+cols+`)
        SELECT gen_random_uuid(), 'orders', $2 || (i - 1), 'order.changed', '\x00', 3, 'broker away', `+next+vals+`
        FROM generate_series(1, $1::int) i`, n, prefix)
}

// aggregates names n aggregates prefix0..prefixN-1.
func aggregates(prefix string, n int) []string {
	aggs := make([]string, n)
	for i := range aggs {
		aggs[i] = fmt.Sprint(prefix, i)
	}
	return aggs
}

// The case: 2,000 rows restored with retry_at at its default, in
// backoff for an hour by next_attempt_at, ahead of 500 fresh rows of other
// aggregates. Every claim's window was those rows, and none of the 500
// went out. The relay repairs them at start (retry_at is their
// next_attempt_at: they still wait for it) and names them once.
func TestForeignRowsDoNotStallTheClaims(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.foreign(t, 2000, "restored-", "now() + interval '1 hour'", "")
	b.write(t, 1, aggregates("fresh-", 500)...)
	logs := &testkit.SyncBuffer{}
	mp := newMeterRecorder()
	r := b.newRelayWith(t, nopPublisher{}, Config{Table: b.db.Table(), ID: "r1", Logger: slog.New(slog.NewTextHandler(logs, nil)), MeterProvider: mp})
	start(t, r)
	b.waitPublished(t, 15*time.Second, 500)
	if n := b.count(t, `SELECT count(*) FROM outbox WHERE aggregate_id LIKE 'restored-%' AND state = 'pending'
            AND retry_at = next_attempt_at AND next_attempt_at > now() + interval '50 minutes'`); n != 2000 {
		t.Fatalf("%d of the 2,000 restored rows pending in backoff with retry_at = next_attempt_at, want all", n)
	}
	// The warning comes once the round that repaired them ends.
	var warned []string
	testkit.WaitFor(t, 10*time.Second, "the repaired rows named", func() bool {
		warned = warned[:0]
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, "repaired rows no relay writes") {
				warned = append(warned, l)
			}
		}
		return len(warned) > 0
	})
	if len(warned) != 1 || !strings.Contains(warned[0], "rows=2000") || !strings.Contains(warned[0], "table="+b.db.Schema+".outbox") ||
		!strings.Contains(warned[0], `ids="[1 2 3 `) {
		t.Fatalf("want one warning naming the table, the 2,000 rows and their first ids; logged:\n%s", logs.String())
	}
	var repaired float64
	for _, p := range mp.recorded() {
		if p.name == "txoutbox.relay.repaired" && p.table() == b.db.Schema+".outbox" {
			repaired += p.value
		}
	}
	if repaired != 2000 {
		t.Fatalf("txoutbox.relay.repaired counted %v rows, want 2000", repaired)
	}
}

// The same while the relay runs: rows a relay of schema version 3 failed
// again after a retry (retry_at passed, next_attempt_at an hour ahead)
// arrive ahead of fresh rows, and fill the retries' part of the window.
func TestForeignRetriesDoNotStallARunningRelay(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	cfg := fastConfig(b)
	cfg.BatchSize = 100
	r := b.newRelayWith(t, nopPublisher{}, cfg)
	start(t, r)
	b.write(t, 1, "first")
	b.waitPublished(t, 10*time.Second, 1)
	b.foreign(t, 300, "old-", "now() + interval '1 hour'", "now() - interval '1 hour'")
	b.write(t, 1, aggregates("fresh-", 50)...)
	b.waitPublished(t, 10*time.Second, 51)
	if n := b.count(t, `SELECT count(*) FROM outbox WHERE aggregate_id LIKE 'old-%' AND state = 'pending' AND retry_at = next_attempt_at`); n != 300 {
		t.Fatalf("%d of the 300 rows repaired, want all", n)
	}
}

// repairOnce runs one repair round of r, which must succeed, and returns
// the ids it repaired, in order.
func repairOnce(t *testing.T, r *Relay) string {
	t.Helper()
	r.repairer.rounds = repairRounds
	_, shards := r.members.claimable()
	rows, err := r.repairer.repair(context.Background(), shards)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(rows))
	for i, row := range rows {
		ids[i] = fmt.Sprint(row.id)
	}
	return strings.Join(ids, " ")
}

// One row no relay wrote ahead of a batch of its aggregate's later rows
// held back every other aggregate too: the claim's window was the
// aggregate's rows, none of which it could take. Repaired, the row holds
// back its own aggregate's later rows and nothing else, until it is due,
// and then goes first. The rows relays and writers write in every state
// are left as they are. The same on an outbox partitioned by ranges of
// ids, the rows spread over several partitions.
func TestRepairKeepsTheOrderAndLeavesWhatRelaysWrite(t *testing.T) {
	t.Parallel()
	for _, partitioned := range []bool{false, true} {
		t.Run(map[bool]string{false: "table", true: "partitions"}[partitioned], func(t *testing.T) {
			t.Parallel()
			testRepairKeepsTheOrder(t, partitioned)
		})
	}
}

func testRepairKeepsTheOrder(t *testing.T, partitioned bool) {
	b := setupInternal(t)
	if partitioned {
		b.partition(t, 4)
	}
	b.foreign(t, 1, "k", "now() + interval '1 hour'", "") // 1: k0
	b.write(t, 5, "k0")                                   // 2..6
	b.write(t, 1, "m")                                    // 7
	// Rows as relays and writers write them beside these, each of an
	// aggregate of its own: failed (8), claimed by a live peer (9),
	// released (10), retried by an operator (11), failed long ago and due
	// (12), and scheduled for later (13).
	b.write(t, 1, "failed", "peer", "released", "retried", "due")
	b.writeAt(t, time.Now().Add(time.Hour), "scheduled")
	r := b.readyRelay(t, "r1")
	b.exec(t, `INSERT INTO outbox_relays (id, name) VALUES ('peer#1', 'peer')`) // after r1 took every shard
	b.exec(t, `UPDATE outbox SET attempts = 1, next_attempt_at = now() + interval '1 hour', retry_at = now() + interval '1 hour'
        WHERE aggregate_id = 'failed'`)
	b.exec(t, `UPDATE outbox SET lease_owner = 'peer#1', lease_expires_at = now() + interval '1 hour',
        next_attempt_at = now() + interval '1 hour' WHERE aggregate_id = 'peer'`)
	b.exec(t, `UPDATE outbox SET attempts = 2, next_attempt_at = now() - interval '1 minute' WHERE aggregate_id = 'due'`)
	b.exec(t, `UPDATE outbox SET state = 'dead', attempts = 10 WHERE aggregate_id = 'retried'`)
	b.exec(t, `UPDATE outbox SET state = 'pending', attempts = 0, next_attempt_at = now(), retry_at = '-infinity' WHERE aggregate_id = 'retried'`)
	released := b.count(t, `SELECT id FROM outbox WHERE aggregate_id = 'released'`)
	b.exec(t, `UPDATE outbox SET lease_owner = 'peer#0', lease_expires_at = now() + interval '1 hour' WHERE id = $1`, released)
	b.exec(t, r.sql.release, outboxsql.RowsArgs{IDs: []int64{int64(released)}, Owner: "peer#0"}.Args()...)

	if got := repairOnce(t, r); got != "1" {
		t.Fatalf("repaired %q, want 1 alone: the others are as relays and writers write them", got)
	}
	// k0 waits behind row 1, the rest go (but the row the peer holds and
	// the one scheduled for later).
	rows, err := r.claimer.claim(context.Background(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if got := idsOf(rows); !strings.HasPrefix(got, "7 ") || strings.Contains(" "+got+" ", " 2 ") {
		t.Fatalf("claimed %q, want row 7 first and none of k0's rows 2..6", got)
	}
	b.exec(t, `UPDATE outbox SET next_attempt_at = now() - interval '1 second', retry_at = now() - interval '1 second' WHERE id = 1`)
	if got := claimIDs(t, r); !strings.HasPrefix(got, "1 2 3 4 5 6") {
		t.Fatalf("claimed %q once row 1 is due, want 1 2 3 4 5 6 first", got)
	}
}

// The rows repaired are named once per episode (the rounds in a row that
// repair some), with how many more came after at its end, and a row never
// due (next_attempt_at 'infinity') is repaired like the rest, so it holds
// back only its own aggregate, and named apart: it holds it back until an
// operator acts.
func TestRepairNamesTheRowsOncePerEpisode(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	b.foreign(t, 1, "stuck", "'infinity'", "")                           // 1
	b.foreign(t, 1, "later", "now() + interval '1 hour'", "'-infinity'") // 2
	logs := &testkit.SyncBuffer{}
	r := b.newRelayWith(t, nopPublisher{}, Config{Table: b.db.Table(), ID: "r1", Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ready(t, r)
	round := func() {
		t.Helper()
		r.repairer.rounds = repairRounds
		if err := r.repairer.round(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	round()
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, `rows=2 ids="[1 2]"`) {
		t.Fatalf("want a warning naming rows 1 and 2; logged:\n%s", out)
	}
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "never due") || !strings.Contains(out, "rows=1 ids=[1]") {
		t.Fatalf("want an error naming row 1, never due; logged:\n%s", out)
	}
	if b.count(t, `SELECT count(*) FROM outbox WHERE id = 1 AND retry_at = 'infinity'`) != 1 {
		t.Fatal("row 1's retry_at is not 'infinity'")
	}
	b.foreign(t, 1, "again", "now() + interval '1 hour'", "") // 3: the episode goes on
	round()
	round()
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d warnings, want the rows named once; logged:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "no more found") || !strings.Contains(logs.String(), "rows=1 in_all=3") {
		t.Fatalf("want the episode's end to say 1 more row was repaired, 3 in all; logged:\n%s", logs.String())
	}
}
