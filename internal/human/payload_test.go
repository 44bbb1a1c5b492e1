package human

import (
	"bytes"
	"strings"
	"testing"
)

func TestShowPayloadWhole(t *testing.T) {
	for _, tc := range []struct {
		in         string
		kind, text string
	}{
		{`{"a":[1,2]}`, "json", "{\n  \"a\": [\n    1,\n    2\n  ]\n}"},
		{"plain text\n", "text", "plain text\n"},
		{"\x00\x01\xff", "binary", "00000000  00 01 ff                                          |...|"},
		{strings.Repeat("[", 2000) + strings.Repeat("]", 2000), "json, compact: indented it would pass 1 MiB", strings.Repeat("[", 2000) + strings.Repeat("]", 2000)},
	} {
		p := ShowPayload([]byte(tc.in), PayloadHead)
		if p.Kind != tc.kind || p.Text != tc.text || p.Cut != 0 {
			t.Errorf("ShowPayload(%.40q) = %q %.80q cut %d, want %q %.80q whole", tc.in, p.Kind, p.Text, p.Cut, tc.kind, tc.text)
		}
	}
	// A payload within whole is shown whole however long.
	long := bytes.Repeat([]byte("x"), 3*PayloadHead)
	if p := ShowPayload(long, len(long)); p.Cut != 0 || len(p.Text) != len(long) {
		t.Errorf("a payload of %d bytes within whole: %d shown, %d cut", len(long), len(p.Text), p.Cut)
	}
}

func TestShowPayloadCut(t *testing.T) {
	// Text: cut at PayloadHead bytes, or before a character it would split.
	text := strings.Repeat("a", PayloadHead-1) + "ü" + strings.Repeat("b", 100)
	p := ShowPayload([]byte(text), PayloadHead)
	if p.Kind != "text" || p.Text != strings.Repeat("a", PayloadHead-1) || p.Cut != len(text)-(PayloadHead-1) {
		t.Errorf("text cut inside a character: %q, %d bytes shown, %d cut", p.Kind, len(p.Text), p.Cut)
	}
	// JSON: the head indented as far as it goes.
	doc := `{"k":"` + strings.Repeat("v", 2*PayloadHead) + `"}`
	p = ShowPayload([]byte(doc), PayloadHead)
	if want := "{\n  \"k\": \"" + strings.Repeat("v", PayloadHead-6); p.Kind != "json" || p.Text != want || p.Cut != len(doc)-PayloadHead {
		t.Errorf("JSON head: %q %.40q… (%d bytes), %d cut", p.Kind, p.Text, len(p.Text), p.Cut)
	}
	// Binary: a hex dump of the head, 16 bytes a line.
	bin := bytes.Repeat([]byte{0xff, 0x00}, PayloadHead)
	p = ShowPayload(bin, PayloadHead)
	if lines := strings.Count(p.Text, "\n") + 1; p.Kind != "binary" || lines != PayloadHead/16 || p.Cut != len(bin)-PayloadHead {
		t.Errorf("binary head: %q, %d lines, %d cut", p.Kind, lines, p.Cut)
	}
	// A deep document's head is shown as it is, not indented to megabytes.
	deep := strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000)
	if p = ShowPayload([]byte(deep), PayloadHead); p.Text != deep[:PayloadHead] {
		t.Errorf("deep JSON head: %q, %d bytes", p.Kind, len(p.Text))
	}
}
