package human

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Escape returns s on one line with every character that could act on a
// terminal or on the text around it written as an escape: C0 and C1
// control characters and DEL (\x1b, \r, \n), the bidirectional formatting
// characters (\u202e), the line and paragraph separators, and bytes that
// are not UTF-8 (\xff). Values from the database go through it before a
// person sees them: an ESC could clear the screen or forge a link, a CR
// overwrite a line, a U+202E reverse what follows.
func Escape(s string) string { return escape(s, false) }

// EscapeLines is Escape for text shown on several lines (a payload, an
// error): it keeps newlines and tabs.
func EscapeLines(s string) string { return escape(s, true) }

func escape(s string, lines bool) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || unsafeRune(r, lines) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r, lines):
			writeEscape(&b, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func writeEscape(b *strings.Builder, r rune) {
	switch r {
	case '\n':
		b.WriteString(`\n`)
	case '\r':
		b.WriteString(`\r`)
	case '\t':
		b.WriteString(`\t`)
	default:
		if r < 0x100 {
			fmt.Fprintf(b, `\x%02x`, r)
		} else {
			fmt.Fprintf(b, `\u%04x`, r)
		}
	}
}

// unsafeRune reports whether r is escaped; lines keeps \n and \t.
func unsafeRune(r rune, lines bool) bool {
	switch {
	case lines && (r == '\n' || r == '\t'):
		return false
	case r < 0x20, r >= 0x7f && r < 0xa0:
		return true
	}
	return bidiOrSeparator(r)
}

// bidiOrSeparator reports the bidirectional formatting characters and the
// line and paragraph separators.
func bidiOrSeparator(r rune) bool {
	return IsBidi(r) || r == 0x2028 || r == 0x2029
}

// IsBidi reports the bidirectional formatting characters: marks,
// embeddings, overrides and isolates.
func IsBidi(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}

// OneLine is s escaped (Escape) and, past n runes, cut to n-1 and "…"
// (n >= 2), for a table cell.
func OneLine(s string, n int) string {
	s, _ = Clip(Escape(s), n)
	return s
}

// Clip cuts s to n-1 runes and "…" when it has more than n (n >= 2), and
// reports whether it did.
func Clip(s string, n int) (string, bool) {
	if len(s) <= n || utf8.RuneCountInString(s) <= n {
		return s, false
	}
	i := 0
	for range n - 1 {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i] + "…", true
}

// EscapeJSON rewrites the characters Escape escapes that JSON allows raw
// in a string (DEL, C1 controls, bidirectional formatting, the
// separators) as \u escapes, which mean the same characters: the output
// is the same JSON document, safe to print on a terminal. It expects
// valid UTF-8 JSON, as encoding/json writes.
func EscapeJSON(b []byte) []byte {
	var out []byte
	last := 0
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r >= 0x7f && r < 0xa0 || bidiOrSeparator(r) {
			if out == nil {
				out = make([]byte, 0, len(b)+16)
			}
			out = append(out, b[last:i]...)
			out = fmt.Appendf(out, `\u%04x`, r)
			last = i + n
		}
		i += n
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}

// IndentJSON indents the valid JSON document src by two spaces a level,
// as json.Indent does, unless the result would be longer than limit bytes:
// then it returns false. Indentation grows with the square of the depth
// (9,999 nested arrays, 20 KB, indent to 200 MB), so a page or a terminal
// shows the compact form instead (json.Compact, never longer than src).
// The start of a document, cut anywhere, is indented as far as it goes.
func IndentJSON(src []byte, limit int) ([]byte, bool) {
	out := make([]byte, 0, min(2*len(src), limit)+64)
	depth := 0
	inString, escaped := false, false
	newline := func() {
		out = append(out, '\n')
		for range depth {
			out = append(out, ' ', ' ')
		}
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if inString {
			out = append(out, c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			inString = true
			out = append(out, c)
		case '{', '[':
			out = append(out, c)
			j := i + 1
			for j < len(src) && (src[j] == ' ' || src[j] == '\t' || src[j] == '\n' || src[j] == '\r') {
				j++
			}
			if j < len(src) && (src[j] == '}' || src[j] == ']') {
				out = append(out, src[j])
				i = j
				break
			}
			depth++
			newline()
		case '}', ']':
			depth--
			newline()
			out = append(out, c)
		case ',':
			out = append(out, c)
			newline()
		case ':':
			out = append(out, ':', ' ')
		default:
			out = append(out, c)
		}
		if len(out) > limit {
			return nil, false
		}
	}
	if len(out) > limit {
		return nil, false
	}
	return out, true
}

// List renders n items one a line, each indented four spaces as item(i)
// renders it, the first max of them and then how many more there are: the
// events a failure of outboxtest or relaytest lists.
func List(n, max int, item func(i int) string) string {
	var b strings.Builder
	for i := range n {
		if i == max {
			fmt.Fprintf(&b, "\n    … and %d more", n-max)
			break
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("    " + item(i))
	}
	return b.String()
}
