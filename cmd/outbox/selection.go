package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/grants"
	"github.com/txoutbox/txoutbox/internal/human"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/outboxadmin"
)

// sinceFlag is a point in time given as a duration ago (90m, 24h) or an
// RFC 3339 time.
type sinceFlag struct{ t time.Time }

func (s *sinceFlag) String() string {
	if s.t.IsZero() {
		return ""
	}
	return s.t.Format(time.RFC3339)
}

func (s *sinceFlag) Set(v string) error {
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return fmt.Errorf("negative duration %s", v)
		}
		s.t = time.Now().Add(-d)
		return nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		s.t = t
		return nil
	}
	return errors.New("want a duration ago (90m, 24h) or an RFC 3339 time (2026-11-29T10:00:00Z)")
}

// filterFlags select dead events.
type filterFlags struct {
	topic, aggregate, eventType string
	since                       sinceFlag
}

func (f *filterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.topic, "topic", "", "only events of this topic")
	fs.StringVar(&f.aggregate, "aggregate", "", "only events of this aggregate id")
	fs.StringVar(&f.eventType, "type", "", "only events of this event type")
	fs.Var(&f.since, "since", "only events created since: a duration ago (24h) or an RFC 3339 time")
}

// check refuses filters PostgreSQL's text cannot hold (not UTF-8, a NUL),
// which the database would answer with an error after connecting.
func (f *filterFlags) check() error {
	for name, v := range map[string]string{"--topic": f.topic, "--aggregate": f.aggregate, "--type": f.eventType} {
		if err := textFlag(name, v); err != nil {
			return err
		}
	}
	return nil
}

// textFlag refuses a value PostgreSQL's text cannot hold.
func textFlag(name, v string) error {
	switch {
	case !utf8.ValidString(v):
		return usagef("%s %s is not UTF-8 text", name, human.Escape(v))
	case strings.ContainsRune(v, 0):
		return usagef("%s %s contains a NUL character", name, human.Escape(v))
	}
	return nil
}

func (f *filterFlags) filter(ids []int64) outboxadmin.Filter {
	return outboxadmin.Filter{IDs: ids, Topic: f.topic, AggregateID: f.aggregate, Type: f.eventType, Since: f.since.t}
}

// parseInterleaved parses flags that may come before, between and after
// the positional arguments (IDs), which the flag package alone stops at,
// then the environment (see parseFlags), and returns the positional
// arguments.
func (proc *process) parseInterleaved(fs *flag.FlagSet, args []string, commandLineOnly ...string) ([]string, error) {
	var positional []string
	for {
		if err := proc.parseArgs(fs, args, commandLineOnly...); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, proc.applyEnv(fs, commandLineOnly...)
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// parseIDs reads outbox row ids (the ID column of outbox dead list).
func parseIDs(args []string) ([]int64, error) {
	var ids []int64
	seen := map[int64]bool{}
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return nil, usagef("bad event ID %q: want a positive integer (the ID column of 'outbox dead list')", a)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// The privileges an operator command needs (see internal/grants).
var (
	readerGrants   = grantsFor{"a read-only operator command", grants.Reader}
	operatorGrants = grantsFor{"an operator command that changes events", grants.Operator}
)

// grantsFor names who needs what, for the message of a missing grant.
type grantsFor struct {
	who   string
	needs func(outboxsql.Names) []grants.Need
}

// check fails with the GRANT to run when the connection lacks a privilege:
// PostgreSQL's catalogs answer (grants.Check), or MySQL's
// information_schema (grants.CheckMySQL).
func (g grantsFor) check(ctx context.Context, db *sql.DB, mysql bool, table txoutbox.Table) error {
	if mysql {
		names, err := outboxsql.MySQLNamesFor(table.Schema, table.Name)
		if err != nil {
			return usagef("%v", err)
		}
		return grants.CheckMySQL(ctx, db, g.who, g.needs(names))
	}
	names, err := outboxsql.NamesFor(table.Schema, table.Name)
	if err != nil {
		return usagef("%v", err)
	}
	return grants.Check(ctx, db, g.who, g.needs(names))
}

// openAdmin connects, checks the role has what the command needs, builds
// the operator API for the table flags and checks the table's schema
// (outboxadmin.Admin.CheckSchema).
func openAdmin(ctx context.Context, common *commonFlags, cfg outboxadmin.Config, need grantsFor) (*outboxadmin.Admin, *sql.DB, error) {
	table, err := common.outboxTable()
	if err != nil {
		return nil, nil, err
	}
	cfg.Table = table
	if cfg.StaleAfter < 0 {
		return nil, nil, usagef("--stale-after is negative (%s)", cfg.StaleAfter)
	}
	if common.mysql() && cfg.Slot != "" {
		return nil, nil, usagef("--slot: MySQL/MariaDB has no WAL relay (see docs/mysql.md)")
	}
	db, err := common.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := need.check(ctx, db, common.mysql(), table); err != nil {
		db.Close()
		return nil, nil, err
	}
	adm, err := outboxadmin.New(db, cfg)
	if err != nil {
		db.Close()
		return nil, nil, usagef("%v", err)
	}
	if err := adm.CheckSchema(ctx); err != nil {
		db.Close()
		return nil, nil, err
	}
	return adm, db, nil
}

// shardRanges renders ascending shards compactly: "0-63, 128, 200-255".
func shardRanges(shards []int) string {
	if len(shards) == 0 {
		return "none"
	}
	var parts []string
	for i := 0; i < len(shards); {
		j := i
		for j+1 < len(shards) && shards[j+1] == shards[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(shards[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", shards[i], shards[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// oneLine escapes s onto one line and shortens it to n runes, for tables
// (human.OneLine).
func oneLine(s string, n int) string { return human.OneLine(s, n) }
