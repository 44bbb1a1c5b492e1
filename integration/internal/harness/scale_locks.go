package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// lockoutLog is the start of the message a relay logs once per table it
// locks out (relay.Config.LockTimeout).
const lockoutLog = "relay: a statement on the table gave up on a lock"

// TenantLocks: one `outbox relay --schemas` process, with --max-conns
// maxConns (0: its default), serves the outbox tables of tables schemas, each written
// rate events a second by a writer of its own for window. From lockAt into
// the window, another session holds the last locked of them, each with
// its companions (relays, shards, claim floor), ACCESS EXCLUSIVE for
// lockFor, as a DBA's ALTER TABLE, a VACUUM FULL or a stuck migration
// does. Their writers wait for it; the others go on.
//
// Promised: the other tenants' events go from commit to mark with a p99
// under maxP99 over the whole window (and the line gives the p99 of those
// committed while the locks were held apart); the relay logs each locked
// table once, and only those, and `outbox status --schemas` run during the
// locks shows those tables locked, with the session holding them; once
// the locks are gone, every event written is published, none lost
// (locked_max_ms: the locked tables' events, all committed after the
// locks went, from commit to mark).
//
// The relay runs with production's intervals, and the window starts once
// it serves every table, as in TenantFairness.
func TenantLocks(tables, locked, rate, maxConns int, window, lockAt, lockFor, maxP99 time.Duration) Scale {
	return Scale{Name: "tenant-locks", Alone: true, Run: func(ctx context.Context, env *Env) (string, error) {
		fail := func(format string, args ...any) error { return fmt.Errorf("tenant-locks: "+format, args...) }
		if lockAt+lockFor >= window || locked >= tables {
			return "", fail("the locks (from %s for %s) must end inside the window (%s), on fewer than all %d tables", lockAt, lockFor, window, tables)
		}
		schemas, pattern, drop, err := tenantSchemas(ctx, env, tables)
		defer drop()
		if err != nil {
			return "", fail("%w", err)
		}
		var (
			names   = make([]outboxsql.Names, tables)
			writers = make([]*txoutbox.Writer, tables)
			union   []string
			isLock  = map[string]bool{} // the locked tables, as schema.outbox
		)
		for i, s := range schemas {
			if names[i], err = outboxsql.NamesFor(s, ""); err != nil {
				return "", err
			}
			if writers[i], err = txoutbox.NewWriter(txoutbox.WriterConfig{Table: txoutbox.Table{Schema: s}}); err != nil {
				return "", err
			}
			union = append(union, "SELECT event_id, created_at, published_at, state FROM "+names[i].Table)
			if i >= tables-locked {
				isLock[s+".outbox"] = true
			}
		}
		all := "(" + strings.Join(union, " UNION ALL ") + ") e"
		flags := DefaultRelayFlags()
		flags.Heartbeat, flags.StaleAfter, flags.Lease = 2*time.Second, 15*time.Second, 30*time.Second
		flags.Schemas = pattern
		flags.Extra = []string{"--poll-interval", "1s"}
		if maxConns > 0 {
			flags.Extra = append(flags.Extra, "--max-conns", fmt.Sprint(maxConns))
		}
		conns, err := tenantConns(ctx, env, tables)
		if err != nil {
			return "", err
		}
		defer closeAll(conns)
		tableNames := make([]string, tables)
		for i := range names {
			tableNames[i] = names[i].Table
		}
		_, _, stop, err := world(ctx, env, flags, 1)
		if err != nil {
			return "", err
		}
		defer stop()
		if _, err := tenantWarmUp(ctx, env, conns, writers, tableNames, all); err != nil {
			return "", fail("%w", err)
		}

		// The DBA's session, on a connection of its own.
		dba, err := env.DB.SQL.Conn(ctx)
		if err != nil {
			return "", err
		}
		defer dba.Close()
		var lockPID int
		if err := dba.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&lockPID); err != nil {
			return "", err
		}
		type lockRun struct {
			from, to time.Time
			status   map[string]string // outbox status --schemas: table → its error
			err      error
		}
		done := make(chan lockRun, 1)
		go func() {
			var r lockRun
			defer func() { done <- r }()
			if !sleep(ctx, lockAt) {
				r.err = ctx.Err()
				return
			}
			tx, err := dba.BeginTx(ctx, nil)
			if err != nil {
				r.err = err
				return
			}
			defer tx.Rollback() //nolint:errcheck // rolled back below: the locks are all it does
			var rels []string
			for i := tables - locked; i < tables; i++ {
				rels = append(rels, names[i].Table, names[i].Relays, names[i].Shards, names[i].Floor)
			}
			if _, err := tx.ExecContext(ctx, "LOCK TABLE "+strings.Join(rels, ", ")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
				r.err = err
				return
			}
			r.from = time.Now()
			// What status shows once the relay has met the locks.
			if !sleep(ctx, min(10*time.Second, lockFor/2)) {
				r.err = ctx.Err()
				return
			}
			r.status, r.err = tenantStatus(ctx, env, pattern)
			if !sleep(ctx, time.Until(r.from.Add(lockFor))) {
				r.err = errors.Join(r.err, ctx.Err())
				return
			}
			if err := tx.Rollback(); err != nil {
				r.err = errors.Join(r.err, err)
			}
			r.to = time.Now()
		}()
		committed, written, werr := tenantWriters(ctx, conns, writers, rate, window)
		lr := <-done
		switch {
		case werr != nil:
			return "", werr
		case lr.err != nil:
			return "", fail("the DBA's session: %w", lr.err)
		}
		if err := tenantDrained(ctx, env, all); err != nil {
			return "", fail("once the locks went: %w", err)
		}
		lat, err := tenantLockLatencies(ctx, env, names, isLock, committed, lr.from, lr.to)
		if err != nil {
			return "", err
		}
		logged, err := lockoutsLogged(env)
		if err != nil {
			return "", err
		}
		var statusLocked []string
		for table, why := range lr.status {
			if strings.Contains(why, "locked by another session") {
				statusLocked = append(statusLocked, table)
			}
		}
		slices.Sort(statusLocked)
		want := make([]string, 0, locked)
		for t := range isLock {
			want = append(want, t)
		}
		slices.Sort(want)

		p99 := percentile(lat.others, 0.99)
		line := fmt.Sprintf("tables=%d locked=%d lock_s=%.0f rate_per_table=%d max_conns=%d window_s=%.0f events=%d written_eps=%.0f "+
			"commit_p50_ms=%.0f commit_p99_ms=%.0f commit_max_ms=%.0f during_locks_p99_ms=%.0f during_locks_events=%d outside_locks_p99_ms=%.0f "+
			"locked_p99_ms=%.0f locked_max_ms=%.0f locked_events=%d logged_lockouts=%d status_locked=%d lost=%d",
			tables, locked, lr.to.Sub(lr.from).Seconds(), rate, maxConns, window.Seconds(), lat.events, float64(written)/window.Seconds(),
			percentile(lat.others, 0.5)*1000, p99*1000, percentile(lat.others, 1)*1000,
			percentile(lat.during, 0.99)*1000, len(lat.during), percentile(lat.outside, 0.99)*1000,
			percentile(lat.locked, 0.99)*1000, percentile(lat.locked, 1)*1000, len(lat.locked),
			len(logged), len(statusLocked), written-lat.events)
		switch {
		case lat.events != written:
			return line, fail("%d events in the tenants' tables, %d written", lat.events, written)
		case len(lat.during) == 0 || len(lat.locked) == 0:
			return line, fail("nothing measured: %d events of the other tenants committed while the locks were held, %d of the locked tenants'",
				len(lat.during), len(lat.locked))
		case !slices.Equal(logged, want):
			return line, fail("the relay logged lockouts of %v, want one of each locked table %v", logged, want)
		case !slices.Equal(statusLocked, want):
			return line, fail("outbox status --schemas showed %v locked, want %v (its rows: %v)", statusLocked, want, lr.status)
		case !strings.Contains(lr.status[want[0]], fmt.Sprintf("pid %d ", lockPID)):
			return line, fail("outbox status --schemas does not name the session holding the locks (pid %d): %q", lockPID, lr.status[want[0]])
		case p99 > maxP99.Seconds():
			return line, fail("the other tenants' p99 from commit to mark is %.0f ms beside %d locked tables, over %s", p99*1000, locked, maxP99)
		}
		return line, nil
	}}
}

// tenantStatus runs outbox status --schemas on pattern and returns each
// table's error ("" for a table read).
func tenantStatus(ctx context.Context, env *Env, pattern string) (map[string]string, error) {
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(sctx, env.Bin.Outbox, "status", "--json", "--database-url", env.DB.URL, "--schemas", pattern)
	out, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return nil, fmt.Errorf("outbox status --schemas: %w", err)
	}
	var st struct {
		Tables []struct {
			Table string `json:"table"`
			Error string `json:"error"`
		} `json:"tables"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("outbox status --schemas: %w: %s", err, out)
	}
	rows := make(map[string]string, len(st.Tables))
	for _, t := range st.Tables {
		rows[t.Table] = t.Error
	}
	return rows, nil
}

// lockLatencies are TenantLocks' times from commit to mark, in seconds and
// sorted: the other tenants' (others), those of them committed while the
// locks were held (during) and the rest (outside), and the locked
// tenants' (locked).
type lockLatencies struct {
	others, during, outside, locked []float64
	events                          int
}

// tenantLockLatencies reads every table's events and sorts their times
// from commit (committed, by event id) to mark.
func tenantLockLatencies(ctx context.Context, env *Env, names []outboxsql.Names, isLock map[string]bool, committed map[uuid.UUID]time.Time,
	from, to time.Time) (lockLatencies, error) {
	var l lockLatencies
	for _, n := range names {
		table := strings.ReplaceAll(n.Table, `"`, "")
		rows, err := env.DB.SQL.QueryContext(ctx, "SELECT event_id, published_at FROM "+n.Table)
		if err != nil {
			return l, err
		}
		for rows.Next() {
			var (
				id          uuid.UUID
				publishedAt time.Time
			)
			if err := rows.Scan(&id, &publishedAt); err != nil {
				rows.Close()
				return l, err
			}
			at, ok := committed[id]
			if !ok {
				rows.Close()
				return l, fmt.Errorf("tenant-locks: event %s is in %s, but no writer's commit of it returned", id, table)
			}
			d := publishedAt.Sub(at).Seconds()
			l.events++
			switch {
			case isLock[table]:
				l.locked = append(l.locked, d)
			default:
				l.others = append(l.others, d)
				if !at.Before(from) && at.Before(to) {
					l.during = append(l.during, d)
				} else {
					l.outside = append(l.outside, d)
				}
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return l, err
		}
	}
	slices.Sort(l.others)
	slices.Sort(l.during)
	slices.Sort(l.outside)
	slices.Sort(l.locked)
	return l, nil
}

// lockoutLine finds the table of a lockout's line in a relay's log.
var lockoutLine = regexp.MustCompile(`table=(\S+)`)

// lockoutsLogged returns the tables the scenario's relays logged a
// lockout of, one entry a line, sorted.
func lockoutsLogged(env *Env) ([]string, error) {
	logs, err := filepath.Glob(filepath.Join(env.Dir, "relay-*.log"))
	if err != nil {
		return nil, err
	}
	var tables []string
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, lockoutLog) {
				continue
			}
			m := lockoutLine.FindStringSubmatch(line)
			if m == nil {
				return nil, fmt.Errorf("tenant-locks: a lockout logged without its table: %s", line)
			}
			tables = append(tables, strings.Trim(m[1], `"`))
		}
	}
	slices.Sort(tables)
	return tables, nil
}
