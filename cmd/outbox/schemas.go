package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/human"
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/migrations"
	"github.com/txoutbox/txoutbox/outboxadmin"
	"github.com/txoutbox/txoutbox/relay"
)

// schemasFlag is --schemas: the outbox tables of many schemas at once (a
// schema per tenant), for relay, ui, migrate up and status; and, for the
// commands that run on, --discover-interval.
type schemasFlag struct {
	value    string
	discover time.Duration
}

func (s *schemasFlag) register(fs *flag.FlagSet) {
	fs.StringVar(&s.value, "schemas", "", "the outbox table of every schema matching this pattern (* any run, ? one character, [a-k] a class, [^x] not x, not [!x], \\ quotes: 'tenant_*'), "+
		"or of each schema of a comma-separated list; names match exactly as stored in the catalog, case-sensitive (unquoted names are lower case), any name PostgreSQL allows "+
		"(one with a comma, *, ?, [ or spaces at its ends is selected by a pattern); the table is --table in each (excludes --schema)")
}

// registerDiscover registers --discover-interval, for the commands that
// look for the tables again while they run (relay, ui).
func (s *schemasFlag) registerDiscover(fs *flag.FlagSet) {
	fs.DurationVar(&s.discover, "discover-interval", relay.DiscoverIntervalDefault, "with --schemas: look for new and dropped tables this often")
}

// set reports whether --schemas was given.
func (s *schemasFlag) set() bool { return s.value != "" }

// groupConfig is the relay.GroupConfig of --schemas, its relays
// configured by rcfg, for the tables named --table (common.table); --schema
// (common.schema) excludes it. --discover-interval is its DiscoverInterval.
func (s *schemasFlag) groupConfig(common *commonFlags, rcfg relay.Config) (relay.GroupConfig, error) {
	if common.schema != "" {
		return relay.GroupConfig{}, usagef("--schemas and --schema (or OUTBOX_SCHEMA) exclude each other: --schema names one table's schema, --schemas many")
	}
	rcfg.Table = txoutbox.Table{Name: common.table}
	cfg := relay.GroupConfig{Relay: rcfg, DiscoverInterval: s.discover}
	if strings.ContainsAny(s.value, "*?[") {
		if strings.Contains(s.value, ",") {
			return cfg, usagef("--schemas %q: a pattern or a comma-separated list of schemas, not both", s.value)
		}
		cfg.SchemaPattern = s.value
	} else {
		cfg.Schemas = splitList(s.value)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, flagUsage(fmt.Errorf("--schemas: %w", err))
	}
	return cfg, nil
}

// openTables opens the database and lists the tables --schemas selects,
// for the commands that act on each of them (status, migrate up). The
// caller closes db.
func (s *schemasFlag) openTables(ctx context.Context, common *commonFlags) (*sql.DB, relay.GroupConfig, []relay.FoundTable, error) {
	cfg, err := s.groupConfig(common, relay.Config{})
	if err != nil {
		return nil, cfg, nil, err
	}
	db, err := common.open(ctx)
	if err != nil {
		return nil, cfg, nil, err
	}
	found, err := findTables(ctx, db, cfg, s.value)
	if err != nil {
		db.Close()
		return nil, cfg, nil, err
	}
	return db, cfg, found, nil
}

// findTables lists the tables cfg selects; none is an error, so that a
// mistyped pattern does not pass for success.
func findTables(ctx context.Context, db *sql.DB, cfg relay.GroupConfig, flagValue string) ([]relay.FoundTable, error) {
	found, err := relay.FindTables(ctx, db, cfg)
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("--schemas %q selects no schema", flagValue)
	}
	return found, nil
}

// tableName is a table as the per-table lines and the logs show it:
// schema.name, a schema whose name is not plain quoted as in SQL
// ("tenant a".outbox, see ident.Readable). Text output escapes it
// further (human.Escape): a name may hold control characters.
func tableName(t txoutbox.Table) string {
	return ident.ReadableQualified(t.Schema, cmp.Or(t.Name, txoutbox.TableNameDefault))
}

// migrateTables is `outbox migrate up --schemas`: every selected schema's
// tables are migrated, each in its own transaction as `migrate up` does,
// one line per table. A table that fails does not stop the others; the
// command then fails (exit 1) once all were tried.
func migrateTables(ctx context.Context, stdout io.Writer, db *sql.DB, set migrations.Set, found []relay.FoundTable, asJSON bool) error {
	type result struct {
		Table   string `json:"table"`
		Applied []int  `json:"applied"`
		Error   string `json:"error,omitempty"`
	}
	results := make([]result, 0, len(found))
	failed := 0
	for _, f := range found {
		r := result{Table: tableName(f.Table), Applied: []int{}}
		m, err := migrations.New(db, migrations.Config{Set: set, Table: f.Table})
		var applied []int
		if err == nil {
			applied, err = m.Up(ctx)
		}
		if err != nil {
			r.Error = err.Error()
			failed++
		} else {
			r.Applied = nonNil(applied)
		}
		results = append(results, r)
		if asJSON {
			continue
		}
		switch name := human.Escape(r.Table); {
		case r.Error != "":
			fmt.Fprintf(stdout, "%s: failed: %s\n", name, oneLine(r.Error, 500))
		case len(applied) == 0:
			fmt.Fprintf(stdout, "%s: schema is up to date\n", name)
		default:
			fmt.Fprintf(stdout, "%s: applied version(s) %s\n", name, joinInts(applied))
		}
	}
	if asJSON {
		if err := printJSON(stdout, map[string]any{"tables": results}); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("migrate up: %d of %d tables failed", failed, len(found))
	}
	return nil
}

// unserved says why a selected schema's table has nothing to read or
// show, "" when it has: no outbox table, or not migrated.
func unserved(f relay.FoundTable) string {
	switch {
	case !f.Exists:
		return "no outbox table"
	case !f.Migrated:
		return "not migrated: run outbox migrate up"
	}
	return ""
}

// checkSchema checks table's schema as the operator commands do for one
// table (outboxadmin.Admin.CheckSchema).
func checkSchema(ctx context.Context, db *sql.DB, table txoutbox.Table) error {
	adm, err := outboxadmin.New(db, outboxadmin.Config{Table: table})
	if err != nil {
		return err
	}
	return adm.CheckSchema(ctx)
}

// tableStatus is one table's line of `outbox status --schemas`.
type tableStatus struct {
	Table            string  `json:"table"`
	Backlog          int64   `json:"backlog"`
	BacklogEstimated bool    `json:"backlog_estimated"`
	LagSeconds       float64 `json:"lag_seconds"`
	// DueLagSeconds is what --max-lag checks (txoutbox.Stats.DueLag).
	DueLagSeconds float64 `json:"due_lag_seconds"`
	Dead          int64   `json:"dead"`
	DeadEstimated bool    `json:"dead_estimated"`
	// Skipped says why a schema a pattern selects has nothing to read: no
	// outbox table, not migrated, or a schema version the command does not
	// match. A relay group skips those tables too; they fail nothing.
	Skipped string `json:"skipped,omitempty"`
	// Error is why a table could not be read: it fails the command.
	Error string `json:"error,omitempty"`
	// Locks, for a table another session held locked past --lock-timeout
	// (Error says so), are the locks in the way (outboxadmin.Locks).
	Locks []lockJSON `json:"locks,omitempty"`

	lag, dueLag time.Duration
}

// lockedRow is the error and locks of a status row for a table locked by
// another session.
func lockedRow(ctx context.Context, db *sql.DB, table txoutbox.Table) (string, []lockJSON) {
	const why = "locked by another session: the relays publish none of its events until the lock is gone"
	adm, err := outboxadmin.New(db, outboxadmin.Config{Table: table})
	if err != nil {
		return why, nil
	}
	locks, err := adm.Locks(ctx)
	if err != nil || len(locks) == 0 {
		return why, nil
	}
	l := locks[0]
	verb := "holds"
	if !l.Granted {
		verb = "waits for"
	}
	return fmt.Sprintf("%s (pid %d %s %s on %s for %s: %s)", why, l.PID, verb, l.Mode, l.Relation, human.Duration(l.For), l.Query), locksJSON(locks)
}

// statusTables is `outbox status --schemas`: the backlog, lags and dead
// count of each selected table, one row each. A due lag past maxLag exits 3
// as for one table, whatever else failed. Otherwise a table that cannot be
// read (no privileges, the database gone, or locked by another session
// past --lock-timeout: its row says by whom) shows its error and fails the
// command (exit 1) after the others, and so does, when the schemas are
// listed by name (not pattern), one without the outbox table, not
// migrated, or of a schema version the command does not match; one a
// pattern selects shows why and fails nothing, as a relay group skips it.
func statusTables(ctx context.Context, stdout io.Writer, db *sql.DB, found []relay.FoundTable, pattern bool, maxLag time.Duration, asJSON bool) error {
	rows := make([]tableStatus, 0, len(found))
	var failed int
	var worst tableStatus
	for _, f := range found {
		row := tableStatus{Table: tableName(f.Table)}
		notServed := func(why string) {
			if pattern {
				row.Skipped = why
			} else {
				row.Error = why
			}
		}
		if why := unserved(f); why != "" {
			notServed(why)
		} else if err := checkSchema(ctx, db, f.Table); errors.Is(err, migrations.ErrSchemaTooOld) || errors.Is(err, migrations.ErrSchemaTooNew) {
			notServed(err.Error())
		} else if err != nil {
			row.Error = err.Error()
		} else {
			st, err := txoutbox.ReadStats(ctx, db, f.Table)
			switch {
			case outboxadmin.IsLockTimeout(err):
				row.Error, row.Locks = lockedRow(ctx, db, f.Table)
			case err != nil:
				row.Error = err.Error()
			default:
				row.Backlog, row.BacklogEstimated, row.Dead, row.DeadEstimated = st.Backlog, st.BacklogEstimated, st.Dead, st.DeadEstimated
				row.lag, row.LagSeconds = st.Lag, st.Lag.Seconds()
				row.dueLag, row.DueLagSeconds = st.DueLag, st.DueLag.Seconds()
			}
		}
		if row.Error != "" {
			failed++
		}
		if row.dueLag > worst.dueLag {
			worst = row
		}
		rows = append(rows, row)
	}
	exceeded := maxLag > 0 && worst.dueLag > maxLag
	if asJSON {
		if err := printJSON(stdout, map[string]any{"tables": rows, "max_lag_seconds": maxLag.Seconds(), "max_lag_exceeded": exceeded}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TABLE\tBACKLOG\tLAG\tDUE LAG\tDEAD")
		for _, r := range rows {
			name := human.Escape(r.Table)
			if why := cmp.Or(r.Error, r.Skipped); why != "" {
				fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\n", name, oneLine(why, 200))
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, count(r.Backlog, r.BacklogEstimated, "~"), human.Duration(r.lag), human.Duration(r.dueLag),
				count(r.Dead, r.DeadEstimated, "~"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	// The lag first: a table that cannot be read must not hide one that
	// is late from the alert.
	if exceeded {
		msg := fmt.Sprintf("%s: due lag %s exceeds --max-lag %s", human.Escape(worst.Table), human.Duration(worst.dueLag), maxLag)
		if failed > 0 {
			msg += fmt.Sprintf(" (and %d of %d tables could not be read)", failed, len(found))
		}
		return exitError{code: exitLagExceeded, msg: msg}
	}
	if failed > 0 {
		return fmt.Errorf("status: %d of %d tables could not be read", failed, len(found))
	}
	return nil
}
