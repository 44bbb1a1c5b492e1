package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin"
)

// FuzzDisplay prints fuzzed rows the way dead show, dead list and --json
// do: no control or bidirectional character reaches the terminal, the
// output is bounded by the values' size, not by their nesting, and --json
// stays JSON. `go test` runs the seeds (testkit.HostileRows); `go test
// -fuzz FuzzDisplay` explores.
func FuzzDisplay(f *testing.F) {
	for _, r := range testkit.HostileRows() {
		f.Add(r.Topic, r.Type, r.AggregateID, r.LastError, r.ContentType, r.Headers, r.Payload)
	}
	f.Fuzz(func(t *testing.T, topic, typ, aggregate, lastError, contentType, headers string, payload []byte) {
		r := outboxadmin.Row{ID: 7, EventID: uuid.Nil, Topic: topic, Type: typ, AggregateID: aggregate, AggregateType: typ,
			ContentType: contentType, Payload: payload, PayloadBytes: len(payload), LastError: lastError, State: "dead",
			Attempts: 3, CreatedAt: time.Unix(0, 0), LeaseOwner: aggregate}
		if err := json.Unmarshal([]byte(headers), &r.Headers); err != nil {
			r.Headers, r.RawHeaders, r.HeadersError = nil, json.RawMessage(headers), "not a JSON object of strings: "+err.Error()
		}
		in := len(topic) + 2*len(typ) + 2*len(aggregate) + len(lastError) + len(contentType) + len(headers) + len(payload)
		for _, full := range []bool{false, true} {
			var out bytes.Buffer
			if err := printRow(&out, r, full); err != nil {
				t.Fatal(err)
			}
			displayed(t, out.String(), in)
		}
		displayed(t, oneLine(lastError, 60), 0)
		if r.RawHeaders != nil && !json.Valid(r.RawHeaders) {
			return // a Row never holds headers PostgreSQL's jsonb did not parse
		}
		var out bytes.Buffer
		if err := printJSON(&out, rowJSON(r)); err != nil {
			t.Fatal(err)
		}
		if !json.Valid(out.Bytes()) {
			t.Fatalf("--json output is not JSON: %.300q", out.String())
		}
		displayed(t, out.String(), 2*in)
	})
}

// displayed fails t if out could act on a terminal, or is larger than an
// escaped copy of in bytes of values (at most 6 bytes each: \u202e) plus
// the indentation printJSON and printRow allow themselves.
func displayed(t *testing.T, out string, in int) {
	t.Helper()
	if i, near := testkit.Unsafe(out); i >= 0 {
		t.Fatalf("an unescaped control or bidi character at %d: %q", i, near)
	}
	if limit := 6*in + 8*jsonIndentMax + 4096; len(out) > limit {
		t.Fatalf("%d bytes of output for %d of values, over %d", len(out), in, limit)
	}
	if strings.Contains(out, "%!") {
		t.Fatalf("a formatting error in the output: %.300q", out)
	}
}
