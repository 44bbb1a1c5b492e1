package txoutbox

import (
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// TableNameDefault ("outbox") is the outbox table's name when Table.Name
// is empty.
const TableNameDefault = outboxsql.TableNameDefault

// ErrInvalidTable is matched by errors from Table.Validate: a schema name
// PostgreSQL cannot hold, or a table name that is not a plain SQL
// identifier.
var ErrInvalidTable = outboxsql.ErrInvalidTable

// Table names the outbox table. The relay, the writers and the migrator of
// one outbox must use the same Table.
//
// Besides the events table itself, an outbox has companion tables named
// after it: <name>_relays (relay heartbeats), <name>_shards (shard
// ownership) and <name>_schema_migrations (applied migration versions).
//
// The schema may be any name PostgreSQL allows: 1 to 63 bytes, any but
// NUL (spaces, quotes, dots, non-ASCII letters, upper case), exactly as the
// catalog stores it ("Tenant A", not the folded tenant_a of an unquoted
// name). It only ever goes into SQL quoted, or as a bound parameter. The
// table's name is narrower, ASCII letters, digits and underscores, not
// starting with a digit, because the names of its companions, indexes,
// constraints and partitions are derived from it.
type Table struct {
	// Schema is the PostgreSQL schema, any name PostgreSQL allows. Empty
	// means unqualified: the connection's search_path decides (normally
	// "public").
	Schema string
	// Name is the events table: a plain identifier of at most 45 bytes.
	// Empty means TableNameDefault.
	Name string
}

// name returns the effective table name.
func (t Table) name() string {
	if t.Name == "" {
		return TableNameDefault
	}
	return t.Name
}

// Validate reports whether the schema is a name PostgreSQL can hold (1 to
// 63 bytes, no NUL) and the name a plain SQL identifier (ASCII letters,
// digits, underscores; not starting with a digit) short enough for the
// companion tables' names to fit PostgreSQL's 63-byte limit. A table named
// `x; drop table y` is refused; a schema of that name is a schema like any
// other, always quoted, never interpolated.
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
