package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

//go:embed outbox/*.sql inbox/*.sql mysql/outbox/*.sql mysql/inbox/*.sql
var files embed.FS

// Set is one versioned series of migrations, such as the outbox schema. Its
// SQL files name their tables after the set's base name ("outbox"); the
// migrator renames them to the configured table.
type Set struct {
	name string // directory in the embedded FS and the tables' base name
}

// Outbox is the schema of the outbox table and the relay's coordination
// tables.
var Outbox = Set{name: "outbox"}

// Inbox is the schema of the consumer-side processed-events table used by
// package inbox. Its tables are named after Config.Table.Name (default
// "inbox"), with versions recorded in <name>_schema_migrations.
var Inbox = Set{name: "inbox"}

// FS returns the set's SQL files for PostgreSQL: NNNN_name.up.sql and
// NNNN_name.down.sql, plain SQL with the default table names, usable as
// they are by golang-migrate and Atlas.
func (s Set) FS() fs.FS { return s.fsIn(s.dir(outboxsql.PostgreSQL)) }

// MySQLFS is FS for MySQL 8.0+ and MariaDB 10.6+: a series of its own,
// the same tables with MySQL's types and indexes. A migration file holds
// several statements; a tool that runs it whole needs the driver's
// multiStatements=true (the Migrator runs them one by one).
func (s Set) MySQLFS() fs.FS { return s.fsIn(s.dir(outboxsql.MySQL)) }

// dir is the set's directory in the embedded FS for dialect d.
func (s Set) dir(d outboxsql.Dialect) string {
	if d == outboxsql.MySQL {
		return "mysql/" + s.name
	}
	return s.name
}

func (s Set) fsIn(dir string) fs.FS {
	sub, err := fs.Sub(files, dir)
	if err != nil {
		// Only reachable with a Set value not declared in this package.
		return files
	}
	return sub
}

// migration is one version of a set, as its files hold it.
type migration struct {
	Version int
	Name    string
	up      string
	down    string
}

var fileName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.(up|down)\.sql$`)

// load reads the set's PostgreSQL migrations in version order.
func (s Set) load() ([]migration, error) { return s.loadFor(outboxsql.PostgreSQL) }

// loadFor reads the set's migrations for dialect d in version order.
func (s Set) loadFor(d outboxsql.Dialect) ([]migration, error) {
	dir := s.dir(d)
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil, fmt.Errorf("read %s migrations: %w", s.name, err)
	}
	byVersion := map[int]*migration{}
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %s/%s: name is not NNNN_name.up|down.sql", dir, e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(files, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		}
		if m[3] == "up" {
			mig.up = string(body)
		} else {
			mig.down = string(body)
		}
	}
	out := make([]migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.up == "" || m.down == "" {
			return nil, fmt.Errorf("migration %04d_%s lacks its up or down file", m.Version, m.Name)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	// Versions start at 1 and ascend; a gap is allowed (as golang-migrate
	// allows it), so versions written on separate branches merge in any
	// order. Up applies every version not yet applied, in version order.
	if len(out) > 0 && out[0].Version != 1 {
		return nil, fmt.Errorf("%s migrations: the first version is %d; versions start at 1", s.name, out[0].Version)
	}
	return out, nil
}

// rename returns the migration SQL with the set's base table names replaced
// by quoted names derived from table. Schema qualification comes from the
// search_path the migrator sets, because index names cannot be qualified.
func (s Set) rename(sql, table string) string { return s.renameQuoted(sql, table, ident.Quote) }

// renameQuoted is rename with names quoted by quote (MySQL's backticks).
func (s Set) renameQuoted(sql, table string, quote func(string) string) string {
	re := regexp.MustCompile(`\b` + s.name + `(_[a-z0-9_]+)?\b`)
	return re.ReplaceAllStringFunc(sql, func(word string) string {
		return quote(table + strings.TrimPrefix(word, s.name))
	})
}
