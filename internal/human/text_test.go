package human

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"plain ünïcode":           "plain ünïcode",
		"\x1b[2J":                 `\x1b[2J`,
		"ok\r\x1b[2Kforged":       `ok\r\x1b[2Kforged`,
		"\x1b]8;;http://x\x07":    `\x1b]8;;http://x\x07`,
		"a\u202eevil":             `a\u202eevil`,
		"\u2066iso\u2069":         `\u2066iso\u2069`,
		"bad\xffutf8":             `bad\xffutf8`,
		"two\nlines\tand\u0085c1": `two\nlines\tand\x85c1`,
		"del\x7f":                 `del\x7f`,
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
	if got := EscapeLines("a\nb\tc\r\x1b"); got != "a\nb\tc\\r\\x1b" {
		t.Errorf("EscapeLines = %q", got)
	}
}

func TestClipAndOneLine(t *testing.T) {
	if got, cut := Clip("abcdef", 4); got != "abc…" || !cut {
		t.Errorf("Clip = %q %v", got, cut)
	}
	if got, cut := Clip("ääää", 4); got != "ääää" || cut {
		t.Errorf("Clip of exactly n runes = %q %v", got, cut)
	}
	if got := OneLine("x\x1by"+strings.Repeat("z", 100), 10); got != `x\x1byzzz…` {
		t.Errorf("OneLine = %q", got)
	}
}

func TestEscapeJSON(t *testing.T) {
	in, _ := json.Marshal(map[string]string{"k": "a\u202eb\u0085c"})
	out := EscapeJSON(in)
	if bytes.ContainsRune(out, 0x202e) || bytes.ContainsRune(out, 0x85) {
		t.Fatalf("EscapeJSON left raw characters: %q", out)
	}
	var back map[string]string
	if err := json.Unmarshal(out, &back); err != nil || back["k"] != "a\u202eb\u0085c" {
		t.Fatalf("EscapeJSON changed the document: %q -> %v %v", out, back, err)
	}
}

func TestIndentJSON(t *testing.T) {
	for _, in := range []string{`{"a":[1,2,{}],"b":"x, y: {z}","c":{"d":[]},"e":"q\"uote"}`, `[]`, `"s"`, ` { "a" : [ ] } `} {
		var want bytes.Buffer
		if err := json.Indent(&want, []byte(in), "", "  "); err != nil {
			t.Fatal(err)
		}
		got, ok := IndentJSON([]byte(in), 1<<20)
		if !ok || string(got) != strings.TrimSpace(want.String()) {
			t.Errorf("IndentJSON(%s) = %q %v, want %q", in, got, ok, want.String())
		}
	}
	deep := []byte(strings.Repeat("[", 9999) + strings.Repeat("]", 9999))
	if _, ok := IndentJSON(deep, 1<<20); ok {
		t.Error("IndentJSON of 9,999 nested arrays fit in 1 MiB")
	}
}

func TestList(t *testing.T) {
	item := func(i int) string { return string(rune('a' + i)) }
	if got := List(0, 2, item); got != "" {
		t.Errorf("List of none = %q", got)
	}
	if got := List(2, 2, item); got != "    a\n    b" {
		t.Errorf("List of max = %q", got)
	}
	if got := List(5, 2, item); got != "    a\n    b\n    … and 3 more" {
		t.Errorf("List past max = %q", got)
	}
}
