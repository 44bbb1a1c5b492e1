package outboxsql

import (
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/txoutbox/txoutbox/internal/ident"
)

// ErrInvalidTable is txoutbox.ErrInvalidTable: a schema name PostgreSQL
// cannot hold (empty, longer than 63 bytes, a NUL), or a table name that is
// not a plain SQL identifier.
var ErrInvalidTable = errors.New("txoutbox: invalid table name")

// TableNameDefault is the outbox table's name when none is given
// (txoutbox.TableNameDefault).
const TableNameDefault = "outbox"

// longestSuffix is the longest suffix appended to the table name for its
// companion tables.
const longestSuffix = len("_schema_migrations")

// NamesFor validates an outbox table's schema and name (empty: unqualified,
// and TableNameDefault) and returns the quoted names of the table, its
// companions and its channel. The schema may be any name PostgreSQL allows
// (ident.ValidateQuoted): it only ever goes into SQL quoted. The table's
// name must be plain (ident.Validate), because the companions', indexes',
// constraints' and partitions' names are derived from it: a name such as
// `x; drop table y` is refused.
func NamesFor(schema, name string) (Names, error) {
	if name == "" {
		name = TableNameDefault
	}
	if schema != "" {
		if err := ident.ValidateQuoted(schema); err != nil {
			return Names{}, fmt.Errorf("%w: schema: %w", ErrInvalidTable, err)
		}
	}
	if err := ident.Validate(name); err != nil {
		return Names{}, fmt.Errorf("%w: name: %w", ErrInvalidTable, err)
	}
	if len(name)+longestSuffix > ident.MaxLen {
		return Names{}, fmt.Errorf("%w: name: %q is longer than %d bytes, so %q would not fit PostgreSQL's identifier limit",
			ErrInvalidTable, name, ident.MaxLen-longestSuffix, name+"_schema_migrations")
	}
	return Names{
		Table:    ident.Qualified(schema, name),
		Relays:   ident.Qualified(schema, name+"_relays"),
		Shards:   ident.Qualified(schema, name+"_shards"),
		Floor:    ident.Qualified(schema, name+"_claim_floor"),
		Versions: ident.Qualified(schema, name+"_schema_migrations"),
		Channel:  Channel(schema, name),
		Base:     name,
	}, nil
}

// Channel is the LISTEN/NOTIFY channel of an outbox table (name empty:
// TableNameDefault). Channel names are limited to 63 bytes; a longer
// qualified name is replaced by a hash of it. It may hold any character
// of the schema's name: statements pass it as a string (pg_notify), LISTEN
// quoted.
func Channel(schema, name string) string {
	ch := prefixed("txoutbox.", ".", schema, name)
	if len(ch) > ident.MaxLen {
		ch = fmt.Sprintf("txoutbox.%016x", hash64(ch))
	}
	return ch
}

// prefixed is prefix and the table's name (empty: TableNameDefault),
// after its schema and sep when it has one.
func prefixed(prefix, sep, schema, name string) string {
	if name == "" {
		name = TableNameDefault
	}
	if schema == "" {
		return prefix + name
	}
	return prefix + schema + sep + name
}

// hash64 is the 64-bit FNV-1a hash of s: the part of a name too long for
// an identifier that stands in for the rest.
func hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
