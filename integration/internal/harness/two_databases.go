package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

// TwoDatabases: two services on one server, each with a database of its
// own and an outbox of one schema and table name (the scenario's schema in
// the scenario's database, and the same schema in a second database), each
// with two WAL relays of the default names and writers. While both write,
// operators run `outbox wal takeover --force` against the second database
// again and again, at least takeovers times: given the first database's
// slot (--slot) it must refuse, the slot streamed or not; on its own slot
// while its relays stream it may refuse; every third time its relays are
// stopped first, and it hands the outbox over and drops the second
// database's slot only, after which its relays start again and publish the
// rows left pending. Slot names are the server's: with one default name
// for every database, the second database's relays stood by for the
// first's slot for ever, and a takeover there dropped the first's.
//
// The second database's run is verified as the first's (lost, order,
// duplicates) and its counts are added to the scenario's line. Bound: one
// window per handover.
func TwoDatabases(s Size, takeovers int) Plan {
	var (
		mu     sync.Mutex
		second *Result
	)
	return WAL(Plan{
		Name: "two-databases", Relays: 2, Flags: DefaultRelayFlags(), Write: writeLoad(s),
		Fault: func(ctx context.Context, w *World) (int, error) {
			env, drop, err := secondDatabase(ctx, w.Env)
			if err != nil {
				return 0, err
			}
			defer drop()
			res, err := Run(ctx, env, WAL(Plan{
				Name: "two-databases-second", Relays: 2, Flags: DefaultRelayFlags(), Write: writeLoad(s),
				Fault: walTakeovers(takeovers, w.Env),
				Check: wantNoDead("two-databases-second"),
			}))
			if err != nil {
				return 0, fmt.Errorf("the second database: %w", err)
			}
			if err := res.Check(); err != nil {
				return 0, fmt.Errorf("the second database: %w", err)
			}
			mu.Lock()
			second = &res
			mu.Unlock()
			return 0, nil
		},
		Check: func(ctx context.Context, w *World, res *Result) error {
			if err := wantNoDead("two-databases")(ctx, w, res); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if second == nil {
				return errors.New("two-databases: the second database's run did not finish")
			}
			// One line for both databases: their promises are checked
			// together by the caller (Result.Check).
			scenario, mode, broker := res.Scenario, res.Mode, res.Broker
			*res = res.Add(*second)
			res.Scenario, res.Mode, res.Broker = scenario, mode, broker
			return nil
		},
	})
}

// secondDatabase is env's server with a second database (env's database
// name and "_second", created if missing) holding a schema of env's
// schema's name, migrated: another service's outbox named alike. drop
// drops the schema; the database stays, as env's does.
func secondDatabase(ctx context.Context, env *Env) (*Env, func(), error) {
	dbURL, err := testkit.EnsureDatabase(ctx, env.DB.URL, env.DB.Database()+"_second")
	if err != nil {
		return nil, nil, err
	}
	s, err := testkit.CreateSchema(ctx, dbURL, env.DB.Schema, true)
	if err != nil {
		return nil, nil, err
	}
	dir := filepath.Join(env.Dir, "second")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		_ = s.Drop(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	second := &Env{
		DB: DB{SQL: s.SQL, URL: s.URL, Schema: s.Name}, Bin: env.Bin, Dir: dir, Seed: env.Seed + 1,
		Logf: func(format string, args ...any) { env.Logf("[second database] "+format, args...) },
		// Kafka stays nil: the real cluster's topics are fixed names,
		// which the first database's run uses; a kfake broker of its own.
	}
	return second, func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := s.Drop(dctx); err != nil {
			env.Logf("drop the second database's schema: %v", err)
		}
	}, nil
}

// walTakeovers runs `outbox wal takeover --force` against w's database
// until its writers are done and it ran at least min times, every 0.5-1.5
// s, in rounds of three: given other's slot, which must be refused; on
// its own slot with the relays running, which may be refused (a relay
// streams) or hand over (between two relays' sessions); on its own slot
// with every relay stopped, which must hand over, after which two relays
// start again. Each round checks that other's slot is still there, in
// other's database. One window per handover.
func walTakeovers(min int, other *Env) Fault {
	return func(ctx context.Context, w *World) (int, error) {
		theirs, ours := walDefaultName(other), walDefaultName(w.Env)
		handovers := 0
		err := until(ctx, w, min, 500*time.Millisecond, 1500*time.Millisecond, func(k int) error {
			switch k % 3 {
			case 0:
				out, err := walTakeover(ctx, w, "--slot", theirs)
				if err == nil {
					return fmt.Errorf("outbox wal takeover --force --slot %s in database %s dropped another database's slot: %s", theirs, w.Env.DB.Database(), out)
				}
				if !strings.Contains(err.Error(), "belongs to another database") {
					return fmt.Errorf("outbox wal takeover --force --slot %s: %w; want a refusal naming the other database", theirs, err)
				}
			case 1:
				out, err := walTakeover(ctx, w)
				switch {
				case err == nil:
					handovers++
					w.Env.Logf("wal takeover: handed over between two relays' sessions: %s", oneLine(out))
				case !strings.Contains(err.Error(), "stop the WAL relays first"):
					return fmt.Errorf("outbox wal takeover --force with the relays running: %w", err)
				}
			default:
				if err := w.Fleet.StopAll(); err != nil {
					return err
				}
				out, err := walTakeover(ctx, w)
				if err != nil {
					return fmt.Errorf("outbox wal takeover --force with the relays stopped: %w", err)
				}
				if !strings.Contains(out, "slot "+ours+" dropped") {
					return fmt.Errorf("outbox wal takeover --force: %q, want slot %s dropped", out, ours)
				}
				handovers++
				w.Env.Logf("wal takeover: %s", oneLine(out))
				for range 2 {
					if _, err := w.Fleet.Start(); err != nil {
						return err
					}
				}
				if !waitUntil(ctx, 30*time.Second, func() bool { return w.Fleet.Streaming() != "" }) {
					return errors.New("no relay streams 30s after the handover")
				}
			}
			return slotOfItsDatabase(ctx, other, theirs)
		})
		return handovers, err
	}
}

// walTakeover runs `outbox wal takeover --force` with args against w's
// database and returns its stdout; an error carries its stderr.
func walTakeover(ctx context.Context, w *World, args ...string) (string, error) {
	args = append([]string{"wal", "takeover", "--force", "--database-url", w.Env.DB.URL, "--schema", w.Env.DB.Schema}, args...)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, w.Env.Bin.Outbox, args...).Output()
	w.Tally.add(func(t *Tally) { t.adminOps++ })
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = fmt.Errorf("%w: %s", err, ee.Stderr)
	}
	return string(out), err
}

// slotOfItsDatabase fails unless slot exists and is env's database's.
func slotOfItsDatabase(ctx context.Context, env *Env, slot string) error {
	var database string
	err := env.DB.SQL.QueryRowContext(ctx, `SELECT database FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&database)
	if err != nil {
		return fmt.Errorf("slot %s of database %s: %w", slot, env.DB.Database(), err)
	}
	if database != env.DB.Database() {
		return fmt.Errorf("slot %s is database %s's, want %s's", slot, database, env.DB.Database())
	}
	return nil
}

// oneLine is a command's output on one line.
func oneLine(out string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(out), "\n", " / ")), " ")
}
