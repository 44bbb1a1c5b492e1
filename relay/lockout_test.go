package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// lockWarn is the start of the message a relay logs once per lockout.
const lockWarn = "relay: a statement on the table gave up on a lock"

// Tables another session holds locked (ACCESS EXCLUSIVE on each table and
// its companions, as an ALTER TABLE or a VACUUM FULL does) cost only
// their own tenants: on a pool too small for their statements to wait it
// out, the other tables' events keep going out within a second of their
// commit, no relay backend waits on the locks once they are found, and
// the locked tables are reported (Health, the log once each, the metrics).
// Once the locks are released, the rows committed under them go out, in
// order.
func TestGroupGoesOnBesideLockedTables(t *testing.T) {
	const bound = time.Second
	f := newFleet(t)
	locked := []string{"l1", "l2", "l3"}
	free := []string{"a", "b", "c"}
	for _, n := range append(append([]string{}, locked...), free...) {
		f.add(t, n, true)
	}
	// Room for the free tables' statements, not for every locked table's
	// to wait out the StatementTimeout beside them.
	f.db.SetMaxOpenConns(12)
	pub := newGroupPublisher(0, 0)
	logs := newLogRecorder()
	mp := newMeterRecorder()
	cfg := f.groupConfig(false)
	cfg.Relay.Logger = slog.New(logs)
	cfg.Relay.MeterProvider = mp
	cfg.Relay.StatsInterval = 200 * time.Millisecond
	g := f.newGroup(t, pub, cfg)
	testkit.Run(t, g.Run)
	f.waitServing(t, g, append(append([]string{}, locked...), free...)...)
	for _, n := range append(append([]string{}, locked...), free...) {
		f.write(t, n, 0, 1, "k")
	}
	testkit.WaitFor(t, 10*time.Second, "the first events published", func() bool {
		for _, n := range append(append([]string{}, locked...), free...) {
			if f.count(t, n, "state = 'published'") != 1 {
				return false
			}
		}
		return true
	})

	// A DBA's transaction takes the locked tables and their companions,
	// and writes to them (committed when the locks go).
	ctx := context.Background()
	dba, err := f.base.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dba.Rollback() //nolint:errcheck // committed below
	for _, n := range locked {
		names, err := outboxsql.NamesFor(f.tables[n].Name, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dba.Exec(`LOCK TABLE ` + strings.Join([]string{names.Table, names.Relays, names.Shards, names.Floor}, ", ") +
			` IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: f.tables[n].Table()})
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < 4; i++ {
			e, err := txoutbox.NewEvent(f.tables[n].Name, "order", "k", "order.changed", i)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(ctx, dba, e); err != nil {
				t.Fatal(err)
			}
		}
	}

	isLocked := map[string]bool{}
	for _, n := range locked {
		isLocked[f.tables[n].Name] = true
	}
	lockedOut := func() bool {
		n := 0
		for _, h := range g.Health() {
			if h.Locked && isLocked[h.Table.Schema] {
				n++
			}
		}
		return n == len(locked)
	}
	testkit.WaitFor(t, 10*time.Second, "the locked tables reported locked out (Health)", lockedOut)
	// Their statements gave up within LockTimeout, and the probes never
	// wait: soon no backend of the group waits on the locks.
	waiting := func() int {
		var n int
		if err := f.base.SQL.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
			f.prefix).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testkit.WaitFor(t, 3*time.Second, "no relay backend waiting on the locks", func() bool { return waiting() == 0 })

	type written struct {
		table string
		seq   int
		at    time.Time
	}
	var events []written
	for i := 1; i <= 20; i++ {
		for _, n := range free {
			events = append(events, written{n, i, f.write(t, n, i, 1, "k")})
		}
		time.Sleep(50 * time.Millisecond) // about time: a trickle over a second beside the locked tables
	}
	testkit.WaitFor(t, 30*time.Second, "the free tables' events published", func() bool {
		for _, n := range free {
			if f.count(t, n, "state = 'published'") != 21 {
				return false
			}
		}
		return true
	})
	var worst time.Duration
	for _, e := range events {
		pub.mu.Lock()
		acked := pub.at[fmt.Sprintf("%s/%d", f.tables[e.table].Name, e.seq)]
		pub.mu.Unlock()
		worst = max(worst, acked.Sub(e.at))
	}
	t.Logf("worst commit-to-ack of the free tables beside %d locked ones: %s", len(locked), worst)
	if worst > bound {
		t.Errorf("a free table's event waited %s from commit to acknowledgement beside the locked tables, want under %s", worst, bound)
	}
	if n := waiting(); n > 0 {
		t.Errorf("%d relay backends wait on the locks while they last, want none", n)
	}
	if !lockedOut() {
		t.Errorf("the locked tables are no longer reported locked out while the locks last: %+v", g.Health())
	}

	// Reported once each, in the log and the metrics.
	if n := logs.count(slog.LevelWarn, lockWarn); n != len(locked) {
		t.Errorf("%d lockouts logged at Warn, want one per locked table (%d)", n, len(locked))
	}
	timeouts := map[string]bool{}
	for _, p := range mp.recorded() {
		if p.name == "txoutbox.relay.lock_timeouts" {
			timeouts[p.table()] = true
		}
	}
	durations := map[string]bool{}
	for _, p := range mp.collect(t) {
		if p.name == "txoutbox.relay.locked.duration" && p.value > 0 {
			durations[p.table()] = true
		}
	}
	for _, n := range locked {
		table := f.tables[n].Name + ".outbox"
		if !timeouts[table] || !durations[table] {
			t.Errorf("%s: lock_timeouts counted %t, locked.duration above 0 %t; want both", table, timeouts[table], durations[table])
		}
	}
	for _, n := range free {
		if table := f.tables[n].Name + ".outbox"; timeouts[table] || durations[table] {
			t.Errorf("%s, not locked: lock_timeouts counted %t, locked.duration above 0 %t; want neither", table, timeouts[table], durations[table])
		}
	}

	// The locks go: what was committed under them goes out, in order.
	if err := dba.Commit(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "the locked tables drained once the locks went", func() bool {
		for _, n := range locked {
			if f.count(t, n, "state = 'published'") != 4 {
				return false
			}
		}
		return true
	})
	testkit.WaitFor(t, 5*time.Second, "no table reported locked out", func() bool {
		for _, h := range g.Health() {
			if h.Locked {
				return false
			}
		}
		return true
	})
	if n := logs.count(slog.LevelInfo, "relay: the lock on the table is gone"); n != len(locked) {
		t.Errorf("%d lockouts' ends logged, want one per locked table (%d)", n, len(locked))
	}
	for _, n := range locked {
		pub.checkOrder(t, f.tables[n].Name, 4, "k")
	}
	for _, n := range free {
		pub.checkOrder(t, f.tables[n].Name, 21, "k")
	}
}

// LockTimeout defaults to 200ms, or StatementTimeout when shorter, and is
// refused below LockTimeoutFloor or above StatementTimeout.
func TestLockTimeoutBounds(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want time.Duration // 0: refused
	}{
		{Config{}, LockTimeoutDefault},
		{Config{StatementTimeout: 150 * time.Millisecond}, 150 * time.Millisecond},
		{Config{LockTimeout: 3 * time.Second}, 3 * time.Second},
		{Config{LockTimeout: -time.Second}, 0},
		{Config{LockTimeout: 10 * time.Millisecond}, 0},
		{Config{LockTimeout: 20 * time.Second}, 0},
		{Config{LockTimeout: time.Second, StatementTimeout: 500 * time.Millisecond}, 0},
	} {
		err := c.cfg.Validate()
		if c.want == 0 {
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "LockTimeout") {
				t.Errorf("%+v: Validate = %v, want ErrInvalidConfig naming LockTimeout", c.cfg, err)
			}
			continue
		}
		cfg := c.cfg
		cfg.setDefaults()
		if err != nil || cfg.LockTimeout != c.want {
			t.Errorf("StatementTimeout %s, LockTimeout %s: Validate = %v, LockTimeout %s; want accepted, %s",
				c.cfg.StatementTimeout, c.cfg.LockTimeout, err, cfg.LockTimeout, c.want)
		}
	}
}

// A lock timeout close to the statement timeout still locks the table
// out: the server's statement timeout is set short of the relay's own
// deadline, and a lock timeout not well short of that is cut, so a
// statement waiting on the lock fails as a lock timeout (55P03), not as a
// statement timeout (57014), which the relay would only log and retry.
func TestLockTimeoutNearTheStatementTimeoutLocksTheTableOut(t *testing.T) {
	for _, c := range []struct {
		name            string
		statement, lock time.Duration
	}{
		{"default lock timeout, short statement timeout", 200 * time.Millisecond, 0},
		{"lock timeout just under the statement timeout", time.Second, 900 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFleet(t)
			f.add(t, "l1", true)
			cfg := f.groupConfig(false)
			cfg.Relay.StatementTimeout, cfg.Relay.LockTimeout = c.statement, c.lock
			g := f.newGroup(t, newGroupPublisher(0, 0), cfg)
			testkit.Run(t, g.Run)
			f.waitServing(t, g, "l1")
			dba, err := f.base.SQL.BeginTx(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer dba.Rollback() //nolint:errcheck // the lock's end
			names, err := outboxsql.NamesFor(f.tables["l1"].Name, "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := dba.Exec(`LOCK TABLE ` + strings.Join([]string{names.Table, names.Relays, names.Shards, names.Floor}, ", ") +
				` IN ACCESS EXCLUSIVE MODE`); err != nil {
				t.Fatal(err)
			}
			testkit.WaitFor(t, 10*time.Second, "the table locked out (Health.Locked)", func() bool {
				for _, h := range g.Health() {
					if h.Locked {
						return true
					}
				}
				return false
			})
		})
	}
}
