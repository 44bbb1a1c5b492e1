// Package ident validates and quotes PostgreSQL identifiers, so that
// configurable schema and table names are never interpolated raw into SQL.
package ident

import (
	"errors"
	"fmt"
	"strings"
)

// MaxLen is PostgreSQL's identifier limit (NAMEDATALEN-1 bytes); longer
// names are silently truncated by the server, which would make two
// configured names collide.
const MaxLen = 63

// ErrInvalid is matched by every error Validate and ValidateQuoted return.
var ErrInvalid = errors.New("invalid SQL identifier")

// Validate accepts names made of ASCII letters, digits and underscores that
// do not start with a digit and fit in MaxLen bytes. The rule is deliberately
// narrower than what quoting allows, for names that other names are derived
// from by rules of their own (a table's companions and partitions, a
// publication): ValidateQuoted is the rule for a name used only quoted.
func Validate(name string) error {
	if err := ValidateQuoted(name); err != nil {
		return err
	}
	if !plain(name) {
		return fmt.Errorf("%w: %q may hold only letters, digits and underscores, and may not start with a digit", ErrInvalid, name)
	}
	return nil
}

// ValidateQuoted accepts every name PostgreSQL accepts as a quoted
// identifier: 1 to MaxLen bytes, any of them but NUL. Such a name is safe
// in SQL only through Quote (or as a bound parameter).
func ValidateQuoted(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalid)
	case len(name) > MaxLen:
		return fmt.Errorf("%w: %q is longer than %d bytes", ErrInvalid, name, MaxLen)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%w: %q contains a NUL byte", ErrInvalid, name)
	}
	return nil
}

// plain reports whether name is ASCII letters, digits and underscores, not
// starting with a digit.
func plain(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return name != ""
}

// Quote returns name as a double-quoted identifier, any double quote in it
// doubled: the only form in which a name ValidateQuoted accepts may go into
// SQL text.
func Quote(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// Qualified quotes name, prefixed by schema when schema is not empty.
func Qualified(schema, name string) string {
	if schema == "" {
		return Quote(name)
	}
	return Quote(schema) + "." + Quote(name)
}

// Readable is name as logs, metrics and the CLI show it: as it is when it
// is plain (Validate), so the common names read as they always did, and
// quoted (Quote) otherwise, so that a name holding a dot, a space or a
// quote reads as one name. It is not escaped for a terminal (see
// internal/human) and not meant for SQL.
func Readable(name string) string {
	if plain(name) {
		return name
	}
	return Quote(name)
}

// ReadableQualified is schema.name as Readable shows each part, the name
// alone when schema is empty.
func ReadableQualified(schema, name string) string {
	if schema == "" {
		return Readable(name)
	}
	return Readable(schema) + "." + Readable(name)
}
