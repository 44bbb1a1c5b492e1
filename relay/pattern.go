package relay

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// compilePattern compiles a GroupConfig.SchemaPattern: path.Match's syntax
// ("*" any run, "?" one character, "[a-k]" a class, "[^x]" its negation,
// "\" quoting the character after it), but "*" and "?" match every
// character, "/" too, since a schema's name may hold any. The pattern is
// matched in Go against the catalog's names, never put into SQL.
func compilePattern(pattern string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`(?s)\A`)
	for i := 0; i < len(pattern); {
		switch pattern[i] {
		case '*':
			b.WriteString(`.*`)
			i++
		case '?':
			b.WriteString(`.`)
			i++
		case '[':
			n, err := writeClass(&b, pattern[i+1:])
			if err != nil {
				return nil, fmt.Errorf("%q: %w", pattern, err)
			}
			i += 1 + n
		default:
			r, n, err := patternRune(pattern[i:])
			if err != nil {
				return nil, fmt.Errorf("%q: %w", pattern, err)
			}
			b.WriteString(regexp.QuoteMeta(string(r)))
			i += n
		}
	}
	b.WriteString(`\z`)
	return regexp.Compile(b.String())
}

// writeClass writes the class that s starts (after its "["), as a
// regular expression's, and returns how many bytes of s it took, its
// closing "]" included. As in path.Match, "-" and "]" are escaped inside
// a class, and a class holds at least one character or range.
func writeClass(b *strings.Builder, s string) (int, error) {
	i := 0
	b.WriteByte('[')
	if strings.HasPrefix(s, "^") {
		b.WriteByte('^')
		i++
	}
	members := 0
	for {
		if i >= len(s) {
			return 0, errors.New("a class [ is not closed by ]")
		}
		if s[i] == ']' && members > 0 {
			b.WriteByte(']')
			return i + 1, nil
		}
		lo, n, err := classRune(s[i:])
		if err != nil {
			return 0, err
		}
		i += n
		hi := lo
		if i < len(s) && s[i] == '-' {
			if hi, n, err = classRune(s[i+1:]); err != nil {
				return 0, err
			}
			i += 1 + n
			if hi < lo {
				return 0, fmt.Errorf("the range %c-%c of a class is reversed", lo, hi)
			}
		}
		fmt.Fprintf(b, `\x{%x}`, lo)
		if hi != lo {
			fmt.Fprintf(b, `-\x{%x}`, hi)
		}
		members++
	}
}

// classRune reads one character of a class: "-" and "]" only escaped.
func classRune(s string) (rune, int, error) {
	if s == "" || s[0] == '-' || s[0] == ']' {
		return 0, 0, errors.New(`a class holds "-" or "]" unescaped, or is empty`)
	}
	return patternRune(s)
}

// patternRune reads one character, or "\" and the character it quotes.
func patternRune(s string) (rune, int, error) {
	esc := 0
	if s[0] == '\\' {
		if len(s) == 1 {
			return 0, 0, errors.New(`it ends in a lone \`)
		}
		esc = 1
	}
	r, n := utf8.DecodeRuneInString(s[esc:])
	return r, esc + n, nil
}
