package txoutbox

import (
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// TableNameDefault is the outbox table's name when Table.Name is empty.
const TableNameDefault = "outbox"

// DefaultTableName is TableNameDefault.
//
// Deprecated: use TableNameDefault; defaults are named XDefault.
const DefaultTableName = TableNameDefault

// ErrInvalidTable is matched by errors from Table.Validate: a schema or table
// name that is not a plain SQL identifier.
var ErrInvalidTable = errors.New("txoutbox: invalid table name")

// longestSuffix is the longest suffix appended to the table name for its
// companion tables (see SQLNames and the migrations).
const longestSuffix = len("_schema_migrations")

// Table names the outbox table. The relay, the writers and the migrator of
// one outbox must use the same Table.
//
// Besides the events table itself, an outbox has companion tables named
// after it: <name>_relays (relay heartbeats), <name>_shards (shard
// ownership) and <name>_schema_migrations (applied migration versions).
type Table struct {
	// Schema is the PostgreSQL schema. Empty means unqualified: the
	// connection's search_path decides (normally "public").
	Schema string
	// Name is the events table. Empty means TableNameDefault.
	Name string
}

// name returns the effective table name.
func (t Table) name() string {
	if t.Name == "" {
		return TableNameDefault
	}
	return t.Name
}

// Validate reports whether the schema and name are plain SQL identifiers
// (ASCII letters, digits, underscores; not starting with a digit) short
// enough for the companion tables' names to fit PostgreSQL's 63-byte limit.
// Names such as `x; drop table y` are refused, never interpolated.
func (t Table) Validate() error {
	if t.Schema != "" {
		if err := ident.Validate(t.Schema); err != nil {
			return fmt.Errorf("%w: schema: %w", ErrInvalidTable, err)
		}
	}
	if err := ident.Validate(t.name()); err != nil {
		return fmt.Errorf("%w: name: %w", ErrInvalidTable, err)
	}
	if len(t.name())+longestSuffix > ident.MaxLen {
		return fmt.Errorf("%w: name: %q is longer than %d bytes, so %q would not fit PostgreSQL's identifier limit",
			ErrInvalidTable, t.name(), ident.MaxLen-longestSuffix, t.name()+"_schema_migrations")
	}
	return nil
}

// String returns the quoted, schema-qualified table name.
func (t Table) String() string { return ident.Qualified(t.Schema, t.name()) }

// Channel is the LISTEN/NOTIFY channel on which writers announce new events
// of this table and relays wait for them.
//
// Channel names are limited to 63 bytes; a longer qualified name is
// replaced by a hash of it.
func (t Table) Channel() string {
	ch := "txoutbox." + t.name()
	if t.Schema != "" {
		ch = "txoutbox." + t.Schema + "." + t.name()
	}
	if len(ch) > ident.MaxLen {
		h := fnv.New64a()
		h.Write([]byte(ch))
		ch = fmt.Sprintf("txoutbox.%016x", h.Sum64())
	}
	return ch
}

// SQLNames returns the quoted names of the table and its companions, for
// rendering SQL. It validates first.
//
// It is for txoutbox's own packages (relay, migrations, CLI); applications
// do not need it.
func (t Table) SQLNames() (outboxsql.Names, error) {
	if err := t.Validate(); err != nil {
		return outboxsql.Names{}, err
	}
	return outboxsql.Names{
		Table:   t.String(),
		Relays:  ident.Qualified(t.Schema, t.name()+"_relays"),
		Shards:  ident.Qualified(t.Schema, t.name()+"_shards"),
		Channel: t.Channel(),
	}, nil
}
