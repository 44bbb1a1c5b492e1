package testkit

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"
)

// HostileRow is a dead row of a kind the relay dead-letters or an operator
// tool must survive: headers that are not a JSON object of strings (the
// relay dead-letters those at once), payloads a pretty-printer or a
// terminal chokes on, and text columns with terminal escapes,
// bidirectional overrides or 100 KB values.
type HostileRow struct {
	Kind        string
	Topic       string
	Type        string
	AggregateID string
	ContentType string
	Payload     []byte
	Headers     string // jsonb text
	LastError   string
	EventID     string // "" for a random one
}

// Terminal escapes and bidirectional characters seeded into text columns.
const (
	EscClear   = "\x1b[2J"
	EscOverLn  = "ok\r\x1b[2Kforged"
	EscLink    = "\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07"
	EscTitle   = "\x1b]0;pwned\x07"
	BidiRTLO   = "abc\u202etxt.exe"
	hostileMix = EscClear + EscOverLn + EscLink + EscTitle + BidiRTLO
)

// HostileRows are one row of every kind.
func HostileRows() []HostileRow {
	big := strings.Repeat("x", 100_000)
	deep := strings.Repeat("[", 9999) + strings.Repeat("]", 9999)
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	row := func(kind string) HostileRow {
		return HostileRow{Kind: kind, Topic: "hostile", Type: "t", AggregateID: "agg-" + kind,
			ContentType: "application/json", Payload: []byte(`{"ok":1}`), Headers: `{}`, LastError: "publish: refused"}
	}
	var out []HostileRow
	add := func(kind string, f func(*HostileRow)) {
		r := row(kind)
		f(&r)
		out = append(out, r)
	}
	add("headers-nested", func(r *HostileRow) { r.Headers = `{"retries":3,"nested":{"a":[1,{"b":null}]}}` })
	add("headers-array", func(r *HostileRow) { r.Headers = `[1,"two",{"three":3}]` })
	add("headers-string", func(r *HostileRow) { r.Headers = `"just a string"` })
	add("headers-number", func(r *HostileRow) { r.Headers = `42` })
	add("headers-null", func(r *HostileRow) { r.Headers = `null` })
	add("headers-deep", func(r *HostileRow) { r.Headers = `{"d":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}` })
	add("headers-escapes", func(r *HostileRow) {
		r.Headers = `{"k\u001b[2J":"` + `\u001b]8;;https://evil.example/\u0007click\u001b]8;;\u0007` + `","bidi":"abc\u202etxt","big":"` + big + `"}`
	})
	add("payload-deep", func(r *HostileRow) { r.Payload = []byte(deep) })
	add("payload-invalid-json", func(r *HostileRow) { r.Payload = []byte(`{"not json`) })
	add("payload-binary", func(r *HostileRow) { r.ContentType = "application/octet-stream"; r.Payload = binary })
	add("payload-text-escapes", func(r *HostileRow) { r.ContentType = "text/plain"; r.Payload = []byte(hostileMix + "\nline 2") })
	add("payload-json-bidi", func(r *HostileRow) { r.Payload = []byte("{\"name\":\"abc\u202etxt\u0085\"}") })
	// Valid JSON to encoding/json, which does not check UTF-8: a raw 0x9b
	// is the 8-bit CSI.
	add("payload-json-not-utf8", func(r *HostileRow) { r.Payload = []byte("{\"a\":\"\x9b[2J\xff\"}") })
	add("payload-large", func(r *HostileRow) { r.Payload = []byte(`"` + strings.Repeat("y", 1_100_000) + `"`) })
	add("text-escapes", func(r *HostileRow) {
		r.Topic, r.Type, r.AggregateID, r.LastError = "t"+EscClear+BidiRTLO, "type"+EscOverLn, "agg"+EscLink, "err"+hostileMix
		r.ContentType = "application/json" + EscTitle
	})
	add("text-huge", func(r *HostileRow) {
		r.Topic, r.Type, r.AggregateID, r.LastError = "T"+big, "Y"+big, "A"+big, "E"+big
	})
	add("text-unicode-topic", func(r *HostileRow) { r.Topic = "zahlungen;ü 'x' \"y\" <b>&amp;" })
	add("event-id-zero", func(r *HostileRow) { r.EventID = "00000000-0000-0000-0000-000000000000" })
	return out
}

// SeedHostile inserts HostileRows as dead rows of the outbox in db and
// returns their ids by kind.
func SeedHostile(t testing.TB, db *DB) map[string]int64 {
	t.Helper()
	ids := map[string]int64{}
	for _, r := range HostileRows() {
		var id int64
		err := db.SQL.QueryRowContext(context.Background(), `
INSERT INTO outbox (event_id, topic, aggregate_id, event_type, content_type, payload, headers, state, attempts, last_error)
VALUES (coalesce(nullif($1, '')::uuid, gen_random_uuid()), $2, $3, $4, $5, $6, $7::jsonb, 'dead', 10, $8)
RETURNING id`, r.EventID, r.Topic, r.AggregateID, r.Type, r.ContentType, r.Payload, r.Headers, r.LastError).Scan(&id)
		if err != nil {
			t.Fatalf("seed %s: %v", r.Kind, err)
		}
		ids[r.Kind] = id
	}
	return ids
}

// Unsafe reports the first byte sequence of out a terminal or a page would
// act on: an ASCII control character other than newline and tab, a C1
// control, a bidirectional formatting character, or a byte that is not
// UTF-8 (0x9b is the 8-bit CSI), with its offset; -1 when there is none.
func Unsafe(out string) (int, string) {
	for i := 0; i < len(out); {
		r, n := utf8.DecodeRuneInString(out[i:])
		switch {
		case r == '\n' || r == '\t':
		case r == utf8.RuneError && n == 1, r < 0x20, r >= 0x7f && r < 0xa0,
			r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			lo, hi := max(i-20, 0), min(i+20, len(out))
			return i, out[lo:hi]
		}
		i += n
	}
	return -1, ""
}
