package human

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// PayloadHead is how much of a payload is shown when it is too large to
// show whole: its first 4 KiB, which is a few screens of text or 256 lines
// of hex dump.
const PayloadHead = 4 << 10

// PrettyMax is the most bytes a payload's indented JSON may take; past it
// the payload is shown compact. Indentation grows with the square of the
// nesting depth (see IndentJSON).
const PrettyMax = 1 << 20

// Payload is a payload rendered for a person. Text is not escaped: the
// caller escapes it (EscapeLines) as it does every value from the
// database.
type Payload struct {
	// Kind is the form of Text: "json", "json, compact: indented it would
	// pass 1 MiB", "text", or "binary" for a hex dump (encoding/hex.Dump).
	Kind string
	Text string
	// Cut is how many bytes at the payload's end Text leaves out: 0
	// unless the payload was cut to its first PayloadHead bytes.
	Cut int
}

// ShowPayload renders p: JSON indented (compact if indented it would pass
// PrettyMax), other UTF-8 text as it is, anything else as a hex dump. A
// payload of more than whole bytes (whole is at least PayloadHead) is cut
// to its first PayloadHead bytes, on a character boundary: the start of
// JSON indented as far as it goes, of text as it is, of anything else as
// a hex dump. The CLI and the console show payloads through it, each with
// its own whole.
func ShowPayload(p []byte, whole int) Payload {
	if len(p) > whole && len(p) > PayloadHead {
		return showHead(p)
	}
	if json.Valid(p) {
		if out, ok := IndentJSON(p, PrettyMax); ok {
			return Payload{Kind: "json", Text: string(out)}
		}
		var b bytes.Buffer
		if json.Compact(&b, p) == nil {
			return Payload{Kind: "json, compact: indented it would pass 1 MiB", Text: b.String()}
		}
	}
	if utf8.Valid(p) {
		return Payload{Kind: "text", Text: string(p)}
	}
	return Payload{Kind: "binary", Text: dump(p)}
}

// showHead renders the first PayloadHead bytes of p, which is longer.
func showHead(p []byte) Payload {
	head := p[:PayloadHead]
	if n := utf8CutPoint(p, PayloadHead); n > 0 && utf8.Valid(p[:n]) {
		head = p[:n]
		// The head of a JSON document is no document, but IndentJSON
		// indents it as far as it goes; a deep one stays as it is. The
		// bound keeps the head a few screens.
		if json.Valid(p) {
			if out, ok := IndentJSON(head, 4*PayloadHead); ok {
				return Payload{Kind: "json", Text: string(out), Cut: len(p) - len(head)}
			}
			return Payload{Kind: "json", Text: string(head), Cut: len(p) - len(head)}
		}
		return Payload{Kind: "text", Text: string(head), Cut: len(p) - len(head)}
	}
	return Payload{Kind: "binary", Text: dump(head), Cut: len(p) - len(head)}
}

// utf8CutPoint is where to cut p at n bytes or fewer without splitting a
// character: n moved back past at most three continuation bytes.
func utf8CutPoint(p []byte, n int) int {
	for i := n; i > n-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(p[i]) {
			return i
		}
	}
	return n
}

// dump is p's hex dump without its last newline: offsets, hex and the
// printable ASCII bytes, every other byte shown as a dot.
func dump(p []byte) string {
	return strings.TrimSuffix(hex.Dump(p), "\n")
}
