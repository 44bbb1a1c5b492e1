package txoutbox

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func validEvent() Event {
	return Event{Topic: "orders", AggregateType: "order", AggregateID: "42", Type: "order.placed", Payload: []byte(`{"total":100}`)}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mutate func(*Event)
		field  string // "" means valid
		reason string // substring of the reason
	}{
		{"valid", func(*Event) {}, "", ""},
		{"valid topic charset", func(e *Event) { e.Topic = "a.B_c-9" }, "", ""},
		{"topic at 249 bytes", func(e *Event) { e.Topic = strings.Repeat("t", 249) }, "", ""},
		{"empty topic", func(e *Event) { e.Topic = "" }, "Topic", "empty"},
		{"topic too long", func(e *Event) { e.Topic = strings.Repeat("t", 250) }, "Topic", "longer than Kafka's limit of 249"},
		{"topic with space", func(e *Event) { e.Topic = "my topic" }, "Topic", "characters outside [a-zA-Z0-9._-]"},
		{"topic with slash", func(e *Event) { e.Topic = "a/b" }, "Topic", "characters outside"},
		{"topic dot", func(e *Event) { e.Topic = "." }, "Topic", "not a valid Kafka topic"},
		{"topic dotdot", func(e *Event) { e.Topic = ".." }, "Topic", "not a valid Kafka topic"},
		{"empty type", func(e *Event) { e.Type = "" }, "Type", "empty"},
		{"empty aggregate id", func(e *Event) { e.AggregateID = "" }, "AggregateID", "empty"},
		{"empty aggregate type is fine", func(e *Event) { e.AggregateType = "" }, "", ""},
		{"aggregate id at the limit", func(e *Event) { e.AggregateID = strings.Repeat("a", MaxAggregateIDBytes) }, "", ""},
		{"aggregate id over the limit", func(e *Event) { e.AggregateID = strings.Repeat("a", MaxAggregateIDBytes+1) },
			"AggregateID", "1025 bytes is longer than the limit of 1024"},
		{"event at limit", func(e *Event) { e.Payload = jsonString(MaxPayloadBytesDefault - eventOverhead) }, "", ""},
		{"payload over limit", func(e *Event) { e.Payload = jsonString(MaxPayloadBytesDefault - eventOverhead + 1) },
			"Payload", "the event is 1040385 bytes (payload 1040366, plus aggregate id, type and headers), over the limit of 1040384"},
		{"headers count toward the limit", func(e *Event) {
			e.Payload = jsonString(MaxPayloadBytesDefault - eventOverhead)
			e.Headers = map[string]string{"h": ""}
		}, "Payload", "over the limit of 1040384"},
		{"invalid JSON", func(e *Event) { e.Payload = []byte(`{"a":`) }, "Payload", "not valid JSON"},
		{"empty JSON payload", func(e *Event) { e.Payload = nil }, "Payload", "not valid JSON"},
		{"invalid JSON declared with charset", func(e *Event) { e.ContentType = "application/json; charset=utf-8"; e.Payload = []byte("x") }, "Payload", "not valid JSON"},
		{"invalid JSON declared +json", func(e *Event) { e.ContentType = "application/cloudevents+json"; e.Payload = []byte("x") }, "Payload", "not valid JSON"},
		{"binary payload not checked", func(e *Event) { e.ContentType = "application/x-protobuf"; e.Payload = []byte{0xff, 0x00} }, "", ""},
		{"empty binary payload", func(e *Event) { e.ContentType = "application/octet-stream"; e.Payload = nil }, "", ""},
		{"empty header name", func(e *Event) { e.Headers = map[string]string{"": "x"} }, "Headers", "name is empty"},
		{"headers fine", func(e *Event) { e.Headers = map[string]string{"k": ""} }, "", ""},
		{"not before tomorrow", func(e *Event) { e.NotBefore = time.Now().Add(24 * time.Hour) }, "", ""},
		{"not before within the delay bound", func(e *Event) { e.NotBefore = time.Now().Add(MaxNotBeforeDelay - time.Minute) }, "", ""},
		{"not before beyond the delay bound", func(e *Event) { e.NotBefore = time.Now().Add(MaxNotBeforeDelay + time.Minute) },
			"NotBefore", "beyond MaxNotBeforeDelay"},
		{"not before in the past: at once", func(e *Event) { e.NotBefore = time.Now().Add(-time.Hour) }, "", ""},
		{"not before beyond the age bound", func(e *Event) { e.NotBefore = time.Now().Add(-MaxNotBeforeAge - time.Minute) },
			"NotBefore", "beyond MaxNotBeforeAge"},
		{"not before at the Unix epoch", func(e *Event) { e.NotBefore = time.Unix(0, 0) }, "NotBefore", "1970-01-01"},
		{"a refused topic is reported first", func(e *Event) { e.Topic = ""; e.NotBefore = time.Unix(0, 0) }, "Topic", "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := validEvent()
			tc.mutate(&e)
			err := e.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("Validate() = %v, want an error matching ErrInvalidEvent", err)
			}
			var verr *ValidationError
			if !errors.As(err, &verr) || verr.Field != tc.field {
				t.Fatalf("Validate() = %v, want field %s", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("Validate() = %q, want it to contain %q", err, tc.reason)
			}
		})
	}
}

// eventOverhead is what validEvent adds to its payload's size: aggregate id
// "42", type "order.placed" and aggregate type "order".
const eventOverhead = len("42") + len("order.placed") + len("order")

func jsonString(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = 'x'
	}
	b[0], b[size-1] = '"', '"'
	return b
}

func TestNewEvent(t *testing.T) {
	t.Parallel()
	e, err := NewEvent("orders", "order", "7", "order.placed", map[string]int{"total": 5})
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Payload) != `{"total":5}` || e.ContentType != ContentTypeJSON {
		t.Fatalf("payload %s, content type %s", e.Payload, e.ContentType)
	}
	if _, err := NewEvent("orders", "order", "7", "x", func() {}); err == nil || !strings.Contains(err.Error(), "marshal x payload") {
		t.Fatalf("NewEvent with a func = %v, want a marshal error", err)
	}
}

func TestTableValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		table Table
		ok    bool
	}{
		{Table{}, true},
		{Table{Schema: "app", Name: "events"}, true},
		{Table{Name: "x; drop table y"}, false},
		// Any schema PostgreSQL allows, used only quoted.
		{Table{Schema: `x"; drop table y; --`}, true},
		{Table{Schema: "tenant_sp ace"}, true},
		{Table{Schema: `tenant_q"x`}, true},
		{Table{Schema: "tenant_ü"}, true},
		{Table{Schema: strings.Repeat("a", 63)}, true},
		{Table{Schema: strings.Repeat("a", 64)}, false},
		{Table{Schema: "nul\x00"}, false},
		{Table{Name: "tenant_ü"}, false},
		{Table{Name: `out"box`}, false},
		{Table{Name: strings.Repeat("a", 46)}, false}, // + "_schema_migrations" > 63
		{Table{Name: strings.Repeat("a", 45)}, true},
	} {
		err := tc.table.Validate()
		if tc.ok != (err == nil) {
			t.Errorf("%+v: Validate() = %v, want ok=%v", tc.table, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidTable) {
			t.Errorf("%+v: %v does not match ErrInvalidTable", tc.table, err)
		}
		if _, err := NewWriter(WriterConfig{Table: tc.table}); tc.ok != (err == nil) {
			t.Errorf("%+v: NewWriter() = %v, want ok=%v", tc.table, err, tc.ok)
		}
	}
	if got := (Table{Schema: "app", Name: "events"}).String(); got != `"app"."events"` {
		t.Errorf("String() = %s", got)
	}
	if ch := (Table{Schema: strings.Repeat("s", 60), Name: "outbox"}).Channel(); len(ch) > 63 {
		t.Errorf("Channel() = %q is longer than 63 bytes", ch)
	}
}

func TestNewWriterRejectsNegativeLimit(t *testing.T) {
	t.Parallel()
	_, err := NewWriter(WriterConfig{MaxPayloadBytes: -1})
	if err == nil || !strings.Contains(err.Error(), "MaxPayloadBytes is negative") {
		t.Fatalf("NewWriter = %v", err)
	}
}
