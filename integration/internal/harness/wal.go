package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// WAL runs plan with the WAL relay (outbox relay --mode wal), named
// "<name>-wal". Order is then judged by commit order (see commitOrder),
// which WAL mode promises even without row locks; with the writers'
// row locks it is the id order the polling relay keeps.
func WAL(plan Plan) Plan {
	plan.Name += "-wal"
	plan.Flags.Mode = WALMode
	return plan
}

// commitOrder is a test_decoding slot of the scenario's own that records
// the order in which outbox rows commit: the ground truth a WAL-mode run
// is judged by, read through another output plugin than the relay's.
type commitOrder struct {
	env  *Env
	slot string
}

func newCommitOrder(ctx context.Context, env *Env) (*commitOrder, error) {
	// Slot names are the server's: the scenario's database and schema in
	// a hash first, as a scenario in another database may have a schema
	// of the same name (see TwoDatabases), then the schema as far as it
	// fits.
	sum := sha256.Sum256([]byte(env.DB.Database() + "\x00" + env.DB.Schema))
	slot := strings.ToLower("chaos_order_" + hex.EncodeToString(sum[:4]) + "_" + env.DB.Schema)
	if len(slot) > 63 {
		slot = slot[:63]
	}
	c := &commitOrder{env: env, slot: slot}
	if _, err := env.DB.SQL.ExecContext(ctx, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, slot); err != nil {
		return nil, fmt.Errorf("create the commit-order slot: %w", err)
	}
	return c, nil
}

// ranks maps each committed outbox row id to its position in commit order.
func (c *commitOrder) ranks(ctx context.Context) (map[int64]int64, error) {
	rows, err := c.env.DB.SQL.QueryContext(ctx, `SELECT substring(data from 'id\[bigint\]:([0-9]+)')::bigint
		FROM pg_logical_slot_peek_changes($1, NULL, NULL) WITH ORDINALITY AS c(lsn, xid, data, n)
		WHERE data LIKE $2 ORDER BY n`, c.slot, "table "+c.env.DB.Schema+".outbox: INSERT:%")
	if err != nil {
		return nil, fmt.Errorf("read the commit order: %w", err)
	}
	defer rows.Close()
	out := map[int64]int64{}
	var n int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		n++
		out[id] = n
	}
	return out, rows.Err()
}

func (c *commitOrder) drop(ctx context.Context) {
	_, _ = c.env.DB.SQL.ExecContext(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
		WHERE slot_name = $1 AND database = current_database()`, c.slot)
}

// walDefaultName is the default name of the scenario's WAL relays' slot
// and publication.
func walDefaultName(env *Env) string {
	return outboxsql.WALName(env.DB.Database(), env.DB.Schema, "")
}

// dropWALSlot drops the WAL relays' slot and publication once their
// walsenders are gone: a slot left behind holds the server's WAL forever.
// Only a slot of the scenario's database: a slot name is the server's.
func dropWALSlot(ctx context.Context, env *Env) {
	name := walDefaultName(env)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		_, err := env.DB.SQL.ExecContext(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE slot_name = $1 AND database = current_database()`, name)
		if err == nil {
			break
		}
		if !sleep(ctx, 200*time.Millisecond) {
			break
		}
	}
	_, _ = env.DB.SQL.ExecContext(ctx, `DROP PUBLICATION IF EXISTS `+name)
}

// killAndDropWALSlot kills every relay of f, then drops their slot and
// publication (dropWALSlot) within 30s, even once ctx is done.
func killAndDropWALSlot(ctx context.Context, env *Env, f *Fleet) {
	f.KillAll()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	dropWALSlot(dctx, env)
}

// TopicShared is the topic of CommitOrderNoLocks's shared aggregates.
const TopicShared = "wal-shared"

// CommitOrderNoLocks: beside the usual load, 6 goroutines write events of
// 3 shared aggregates from concurrent transactions that lock nothing, each
// held open 0-20 ms, so ids and commits interleave: a later id often
// commits first. WAL mode must deliver each aggregate's events in commit
// order (the verifier judges order by commit order), which the polling
// relay cannot promise without row locks. The scenario fails if no event
// committed before one with a lower id of its aggregate: it did not test
// anything then.
func CommitOrderNoLocks(s Size) Plan {
	return WAL(Plan{
		Name: "commit-order-no-locks", Relays: 2, Flags: DefaultRelayFlags(), Write: writeLoad(s),
		// Created up front: the real cluster creates no topic on demand.
		Broker: BrokerConfig{Topics: []string{TopicShared}}, ExtraTopics: []string{TopicShared},
		Fault: func(ctx context.Context, w *World) (int, error) {
			wr, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: txoutbox.Table{Schema: w.Env.DB.Schema}, DisableNotify: true})
			if err != nil {
				return 0, err
			}
			ctx, cancel := context.WithTimeout(ctx, s.Over)
			defer cancel()
			errs := make(chan error, 6)
			for g := range 6 {
				go func() {
					errs <- writeShared(ctx, w, wr, g)
				}()
			}
			var first error
			for range 6 {
				if err := <-errs; err != nil && first == nil && ctx.Err() == nil {
					first = err
				}
			}
			return 0, first
		},
		Check: func(ctx context.Context, w *World, res *Result) error {
			n, err := sharedInversions(ctx, w)
			if err != nil {
				return err
			}
			w.Env.Logf("commit-order-no-locks: %d events committed before an event of their aggregate with a lower id", n)
			if n == 0 {
				return errors.New("commit-order-no-locks: no event committed before a lower id of its aggregate; the scenario did not interleave")
			}
			return wantNoDead("commit-order-no-locks")(ctx, w, res)
		},
	})
}

// writeShared commits events of the shared aggregates until ctx ends.
func writeShared(ctx context.Context, w *World, wr *txoutbox.Writer, g int) error {
	for i := 0; ctx.Err() == nil; i++ {
		tx, err := w.Env.DB.SQL.BeginTx(ctx, nil)
		if err != nil {
			return nil // ctx ended
		}
		agg := fmt.Sprintf("shared-%d", w.Env.Intn(3))
		ev := jsonEvent(TopicShared, agg, "shared.changed", 32)
		ev.AggregateType = "shared"
		if err := wr.Write(ctx, tx, ev); err != nil {
			_ = tx.Rollback()
			return nil
		}
		if !sleep(ctx, w.Env.Duration(0, 20*time.Millisecond)) {
			_ = tx.Rollback()
			return nil
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("shared writer %d: commit: %w", g, err)
		}
		if !sleep(ctx, w.Env.Duration(0, 10*time.Millisecond)) {
			return nil
		}
	}
	return nil
}

// sharedInversions counts the shared events committed after an event of
// their aggregate with a higher id.
func sharedInversions(ctx context.Context, w *World) (int, error) {
	names, err := outboxsql.NamesFor(w.Env.DB.Schema, "")
	if err != nil {
		return 0, err
	}
	rows, err := w.Env.DB.SQL.QueryContext(ctx, `SELECT id, aggregate_id FROM `+names.Table+` WHERE topic = $1`, TopicShared)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	type row struct {
		id   int64
		rank int64
	}
	byAgg := map[string][]row{}
	for rows.Next() {
		var (
			r   row
			agg string
		)
		if err := rows.Scan(&r.id, &agg); err != nil {
			return 0, err
		}
		r.rank = w.CommitRank[r.id]
		byAgg[agg] = append(byAgg[agg], r)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	n := 0
	for _, rs := range byAgg {
		sort.Slice(rs, func(i, j int) bool { return rs[i].rank < rs[j].rank })
		var maxID int64
		for _, r := range rs {
			if r.id < maxID {
				n++
			}
			maxID = max(maxID, r.id)
		}
	}
	return n, nil
}

// WALTakeover measures how long a standby takes to stream after the
// streaming relay is SIGKILLed: two WAL relays on one slot, kills times,
// each time killing the one that streams and starting a new standby. It
// returns the time from each SIGKILL to the standby's "streaming" line.
func WALTakeover(ctx context.Context, env *Env, kills int) ([]time.Duration, error) {
	broker, err := StartBroker(ctx, env, BrokerConfig{})
	if err != nil {
		return nil, err
	}
	defer broker.Close()
	flags := DefaultRelayFlags()
	flags.Mode = WALMode
	fleet, err := NewFleet(env, broker.Addr(), flags)
	if err != nil {
		return nil, err
	}
	defer killAndDropWALSlot(ctx, env, fleet)
	defer fleet.Close()
	for range 2 {
		if _, err := fleet.Start(); err != nil {
			return nil, err
		}
	}
	var took []time.Duration
	for k := range kills {
		var active string
		if !waitUntil(ctx, 30*time.Second, func() bool { active = fleet.Streaming(); return active != "" }) {
			return took, fmt.Errorf("kill %d: no relay streams", k)
		}
		// Let the standby settle into its retry cycle: a relay just
		// started would take the slot on its first try.
		if !sleep(ctx, time.Second+time.Duration(env.Intn(200))*time.Millisecond) {
			return took, ctx.Err()
		}
		if err := fleet.Kill(active); err != nil {
			return took, err
		}
		killed := time.Now()
		var next string
		if !waitUntil(ctx, 30*time.Second, func() bool { next = fleet.Streaming(); return next != "" && next != active }) {
			return took, fmt.Errorf("kill %d: no standby streams 30s after %s was killed", k, active)
		}
		took = append(took, time.Since(killed))
		env.Logf("wal takeover: %s killed, %s streams after %s", active, next, took[len(took)-1].Round(time.Millisecond))
		if _, err := fleet.Start(); err != nil {
			return took, err
		}
	}
	return took, fleet.Unexpected()
}
