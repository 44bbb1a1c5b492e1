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

// ErrInvalid is matched by every error Validate returns.
var ErrInvalid = errors.New("invalid SQL identifier")

// Validate accepts names made of ASCII letters, digits and underscores that
// do not start with a digit and fit in MaxLen bytes. The rule is deliberately
// narrower than what quoting allows: names users configure should be plain.
func Validate(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalid)
	}
	if len(name) > MaxLen {
		return fmt.Errorf("%w: %q is longer than %d bytes", ErrInvalid, name, MaxLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return fmt.Errorf("%w: %q may hold only letters, digits and underscores, and may not start with a digit", ErrInvalid, name)
		}
	}
	return nil
}

// Quote returns name as a double-quoted identifier. Callers validate first;
// quoting is the second line of defence.
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
