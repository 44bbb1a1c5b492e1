package txoutbox

import (
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// TableNameDefault is the outbox table's name when Table.Name is empty.
const TableNameDefault = outboxsql.TableNameDefault

// ErrInvalidTable is matched by errors from Table.Validate: a schema or table
// name that is not a plain SQL identifier.
var ErrInvalidTable = outboxsql.ErrInvalidTable

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
	_, err := outboxsql.NamesFor(t.Schema, t.Name)
	return err
}

// String returns the quoted, schema-qualified table name.
func (t Table) String() string { return ident.Qualified(t.Schema, t.name()) }

// Channel is the LISTEN/NOTIFY channel on which writers announce new events
// of this table and relays wait for them.
//
// Channel names are limited to 63 bytes; a longer qualified name is
// replaced by a hash of it.
func (t Table) Channel() string { return outboxsql.Channel(t.Schema, t.Name) }
