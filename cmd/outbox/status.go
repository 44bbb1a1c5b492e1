package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/human"
	"github.com/txoutbox/txoutbox/outboxadmin"
)

// statusLockTimeoutDefault is status's --lock-timeout: how long it waits
// for a lock on a table before it reports the table locked.
const statusLockTimeoutDefault = time.Second

// exitLagExceeded is status's exit code when the due lag exceeds --max-lag,
// so a health check can tell "too far behind" (3) from "could not look" (1).
const exitLagExceeded = 3

func runStatus(ctx context.Context, proc *process, fs *flag.FlagSet, args []string) error {
	stdout := proc.stdout
	var (
		common     commonFlags
		staleAfter = fs.Duration("stale-after", outboxadmin.StaleAfterDefault, "count a relay alive if its heartbeat is younger (the relays' --stale-after)")
		maxLag     = fs.Duration("max-lag", 0, fmt.Sprintf("exit with code %d if the due lag exceeds this (0: never): the lag of the events the relay may publish now, "+
			"leaving out events held behind a delayed event (NotBefore) of their aggregate, which wait by design; with --schemas, the worst table's, "+
			"exit %d even if a table could not be read (else exit 1 for that; a schema a pattern selects without a migrated outbox table is shown and fails nothing)",
			exitLagExceeded, exitLagExceeded))
		slot = fs.String("slot", "", "WAL mode's replication slot to report, of this database (default: the WAL relay's slot of the table; shown if it exists)")
	)
	fs.DurationVar(&common.lockTimeout, "lock-timeout", statusLockTimeoutDefault,
		"a table another session holds locked (ALTER TABLE, VACUUM FULL, a migration) longer than this is reported locked, with who holds the lock (not on MySQL/MariaDB, where it is whole seconds), and fails status (exit 1), instead of waited for")
	var schemas schemasFlag
	common.register(fs)
	schemas.register(fs)
	if err := proc.parseFlagsOnly(fs, args); err != nil {
		return err
	}
	if *maxLag < 0 {
		return usagef("--max-lag is negative (%s)", *maxLag)
	}
	if common.lockTimeout <= 0 {
		return usagef("--lock-timeout must be positive (%s)", common.lockTimeout)
	}
	// openAdmin refuses --slot on MySQL.
	if common.mysql() && schemas.set() {
		return usagef("--schemas: not on MySQL/MariaDB, where a schema is a database: run status once per database, each named in --database-url (see docs/mysql.md)")
	}
	if schemas.set() {
		if *slot != "" {
			return usagef("--slot: WAL mode serves one table; not with --schemas")
		}
		db, cfg, found, err := schemas.openTables(ctx, &common)
		if err != nil {
			return err
		}
		defer db.Close()
		return statusTables(ctx, stdout, db, found, cfg.SchemaPattern != "", *maxLag, common.json)
	}
	adm, db, err := openAdmin(ctx, &common, outboxadmin.Config{StaleAfter: *staleAfter, Slot: *slot}, readerGrants)
	if err != nil {
		return err
	}
	defer db.Close()
	st, err := adm.Status(ctx)
	if outboxadmin.IsLockTimeout(err) {
		return statusLocked(ctx, stdout, adm, common.lockTimeout, common.json)
	}
	if err != nil {
		return err
	}
	ws := walSlotOf(st.Slot)
	exceeded := *maxLag > 0 && st.DueLag > *maxLag
	if common.json {
		out := statusJSON(st, *maxLag, exceeded)
		out.WALSlot = ws
		err = printJSON(stdout, out)
	} else {
		err = printStatus(stdout, st, *staleAfter)
		if err == nil && ws != nil {
			err = printWALSlot(stdout, ws)
		}
	}
	if err != nil {
		return err
	}
	if exceeded {
		return exitError{code: exitLagExceeded, msg: fmt.Sprintf("due lag %s exceeds --max-lag %s", human.Duration(st.DueLag), *maxLag)}
	}
	return nil
}

func printStatus(w io.Writer, st outboxadmin.Status, staleAfter time.Duration) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "backlog\t%s\n", count(st.Backlog, st.BacklogEstimated, "~"))
	fmt.Fprintf(tw, "lag\t%s\n", human.Duration(st.Lag))
	if st.DueLag != st.Lag {
		fmt.Fprintf(tw, "due lag\t%s (leaves out events held behind delayed ones; --max-lag checks it)\n", human.Duration(st.DueLag))
	} else {
		fmt.Fprintf(tw, "due lag\t%s\n", human.Duration(st.DueLag))
	}
	fmt.Fprintf(tw, "dead\t%s\n", count(st.Dead, st.DeadEstimated, "~"))
	scheduled := count(st.Scheduled, st.ScheduledEstimated, "~")
	if st.NextScheduled.IsZero() {
		fmt.Fprintf(tw, "scheduled\t%s\n", scheduled)
	} else {
		fmt.Fprintf(tw, "scheduled\t%s (next due %s)\n", scheduled, st.NextScheduled.UTC().Format(time.RFC3339))
	}
	if len(st.Topics) > 0 {
		fmt.Fprintln(tw, "\nTOPIC\tBACKLOG\tLAG\tDEAD\tSCHEDULED")
		for _, t := range st.Topics {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", oneLine(t.Topic, 80), count(t.Backlog, t.BacklogAtLeast, "≥"),
				human.Duration(t.Lag), count(t.Dead, t.DeadAtLeast, "≥"), t.Scheduled)
		}
	}
	inexact := st.BacklogEstimated || st.DeadEstimated || st.ScheduledEstimated
	for _, t := range st.Topics {
		inexact = inexact || t.BacklogAtLeast || t.DeadAtLeast
	}
	if inexact {
		fmt.Fprintf(tw, "(~N: an estimate, beyond %d events; ≥N: a topic's events counted up to %d)\n", txoutbox.StatsExactMax, txoutbox.TopicStatsMax)
	}
	alive := 0
	for _, r := range st.Relays {
		if r.Alive {
			alive++
		}
	}
	fmt.Fprintf(tw, "\nrelays: %d alive (heartbeat younger than %s)\n", alive, staleAfter)
	if len(st.Relays) > 0 {
		fmt.Fprintln(tw, "RELAY\tHOST\tSTATE\tHEARTBEAT\tSHARDS")
		for _, r := range st.Relays {
			state := "alive"
			if !r.Alive {
				state = "stale"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%s (%d)\n", oneLine(r.ID, 80), oneLine(r.Host, 60), state, human.Duration(r.HeartbeatAge), shardRanges(r.Shards), len(r.Shards))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Unowned) > 0 {
		fmt.Fprintf(w, "unowned shards: %s (%d); their events wait for a live relay\n", shardRanges(st.Unowned), len(st.Unowned))
	}
	if len(st.Handovers) > 0 {
		fmt.Fprintf(w, "shards in handover: %s (%d); their new owner waits for the previous one's rows\n", shardRanges(st.Handovers), len(st.Handovers))
	}
	return nil
}

// statusLocked is status for a table another session holds locked: the
// figures cannot be read, so it shows who holds the lock (outboxadmin.Locks)
// and fails (exit 1).
func statusLocked(ctx context.Context, stdout io.Writer, adm *outboxadmin.Admin, waited time.Duration, asJSON bool) error {
	locks, err := adm.Locks(ctx)
	// MySQL has no view of who holds a table's metadata lock common to
	// its servers (outboxadmin.Admin.Locks): the lock is reported alone.
	unlisted := errors.Is(err, errors.ErrUnsupported)
	if err != nil && !unlisted {
		return err
	}
	msg := fmt.Sprintf("the outbox table is locked by another session: its figures were not read within --lock-timeout %s, "+
		"and the relays publish none of its events until the lock is gone", waited)
	if asJSON {
		if err := printJSON(stdout, map[string]any{"locked": true, "locks": locksJSON(locks)}); err != nil {
			return err
		}
		return errors.New(msg)
	}
	if unlisted {
		_, err = fmt.Fprintln(stdout, "who holds the lock is not listed on MySQL/MariaDB: SHOW PROCESSLIST shows the sessions, those waiting for it in state \"Waiting for table metadata lock\"")
	} else {
		err = printLocks(stdout, locks)
	}
	if err != nil {
		return err
	}
	return errors.New(msg)
}

// printLocks shows the locks outboxadmin.Locks found, one a line.
func printLocks(w io.Writer, locks []outboxadmin.Lock) error {
	if len(locks) == 0 {
		_, err := fmt.Fprintln(w, "no lock on the tables now: a row or advisory lock, or one released since")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tRELATION\tMODE\tGRANTED\tFOR\tAPPLICATION\tSTATE\tQUERY")
	for _, l := range locks {
		granted := "waiting"
		if l.Granted {
			granted = "held"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.PID, oneLine(l.Relation, 80), l.Mode, granted, human.Duration(l.For),
			oneLine(l.Application, 40), oneLine(l.State, 30), oneLine(l.Query, 100))
	}
	return tw.Flush()
}

// lockJSON is a lock of outboxadmin.Locks in status --json.
type lockJSON struct {
	PID         int     `json:"pid"`
	Relation    string  `json:"relation"`
	Mode        string  `json:"mode"`
	Granted     bool    `json:"granted"`
	Application string  `json:"application"`
	State       string  `json:"state"`
	ForSeconds  float64 `json:"for_seconds"`
	Query       string  `json:"query"`
}

func locksJSON(locks []outboxadmin.Lock) []lockJSON {
	out := make([]lockJSON, 0, len(locks))
	for _, l := range locks {
		out = append(out, lockJSON{PID: l.PID, Relation: l.Relation, Mode: l.Mode, Granted: l.Granted, Application: l.Application,
			State: l.State, ForSeconds: l.For.Seconds(), Query: l.Query})
	}
	return out
}

// count shows a count, with mark before it when it is not exact.
func count(n int64, inexact bool, mark string) string {
	if inexact {
		return mark + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}

type topicJSON struct {
	Topic          string  `json:"topic"`
	Backlog        int64   `json:"backlog"`
	BacklogAtLeast bool    `json:"backlog_at_least"`
	LagSeconds     float64 `json:"lag_seconds"`
	Dead           int64   `json:"dead"`
	DeadAtLeast    bool    `json:"dead_at_least"`
	Scheduled      int64   `json:"scheduled"`
}

type relayJSON struct {
	ID                  string    `json:"id"`
	Host                string    `json:"host"`
	Alive               bool      `json:"alive"`
	StartedAt           time.Time `json:"started_at"`
	HeartbeatAt         time.Time `json:"heartbeat_at"`
	HeartbeatAgeSeconds float64   `json:"heartbeat_age_seconds"`
	Shards              []int     `json:"shards"`
}

type statusOutput struct {
	Backlog int64 `json:"backlog"`
	// BacklogEstimated and DeadEstimated: beyond txoutbox.StatsExactMax
	// the counts are estimates (see txoutbox.Stats).
	BacklogEstimated bool    `json:"backlog_estimated"`
	LagSeconds       float64 `json:"lag_seconds"`
	// DueLagSeconds leaves out the events held behind a delayed event of
	// their aggregate (txoutbox.Stats.DueLag): what --max-lag checks.
	DueLagSeconds      float64     `json:"due_lag_seconds"`
	Dead               int64       `json:"dead"`
	DeadEstimated      bool        `json:"dead_estimated"`
	Scheduled          int64       `json:"scheduled"`
	ScheduledEstimated bool        `json:"scheduled_estimated"`
	NextScheduled      *time.Time  `json:"next_scheduled"` // null when nothing is scheduled
	Topics             []topicJSON `json:"topics"`
	Relays             []relayJSON `json:"relays"`
	UnownedShards      []int       `json:"unowned_shards"`
	HandoverShards     []int       `json:"handover_shards"`
	MaxLagSeconds      float64     `json:"max_lag_seconds,omitempty"`
	MaxLagExceeded     bool        `json:"max_lag_exceeded"`
	WALSlot            *walSlot    `json:"wal_slot"` // null without a WAL relay's slot
}

func statusJSON(st outboxadmin.Status, maxLag time.Duration, exceeded bool) statusOutput {
	out := statusOutput{
		Backlog: st.Backlog, BacklogEstimated: st.BacklogEstimated, LagSeconds: st.Lag.Seconds(), DueLagSeconds: st.DueLag.Seconds(),
		Dead: st.Dead, DeadEstimated: st.DeadEstimated,
		Scheduled: st.Scheduled, ScheduledEstimated: st.ScheduledEstimated,
		Topics: []topicJSON{}, Relays: []relayJSON{}, UnownedShards: []int{}, HandoverShards: []int{},
		MaxLagSeconds: maxLag.Seconds(), MaxLagExceeded: exceeded,
	}
	if !st.NextScheduled.IsZero() {
		next := st.NextScheduled.UTC()
		out.NextScheduled = &next
	}
	for _, t := range st.Topics {
		out.Topics = append(out.Topics, topicJSON{Topic: t.Topic, Backlog: t.Backlog, BacklogAtLeast: t.BacklogAtLeast,
			LagSeconds: t.Lag.Seconds(), Dead: t.Dead, DeadAtLeast: t.DeadAtLeast, Scheduled: t.Scheduled})
	}
	for _, r := range st.Relays {
		shards := r.Shards
		if shards == nil {
			shards = []int{}
		}
		out.Relays = append(out.Relays, relayJSON{ID: r.ID, Host: r.Host, Alive: r.Alive, StartedAt: r.StartedAt,
			HeartbeatAt: r.HeartbeatAt, HeartbeatAgeSeconds: r.HeartbeatAge.Seconds(), Shards: shards})
	}
	if st.Unowned != nil {
		out.UnownedShards = st.Unowned
	}
	if st.Handovers != nil {
		out.HandoverShards = st.Handovers
	}
	return out
}
