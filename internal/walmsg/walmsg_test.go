package walmsg

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	in := Event{ID: "01a22c2f-9185-7cdc-9f87-c271aec0a870", Topic: "orders", AggregateID: "o-1", Type: "order.placed",
		Payload: []byte{0, 1, 2, 255}, Headers: json.RawMessage(`{"tenant":"t1"}`), CreatedAt: time.Unix(1700000000, 123000).UTC()}
	b, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.ID != in.ID || string(out.Payload) != string(in.Payload) || string(out.Headers) != string(in.Headers) || !out.CreatedAt.Equal(in.CreatedAt) || out.V != Version {
		t.Fatalf("round trip: %+v, want %+v", out, in)
	}
}

func TestDecodeRefusesOtherMessages(t *testing.T) {
	for _, b := range []string{`not json`, `{"v":2,"id":"x"}`, `{}`} {
		if _, err := Decode([]byte(b)); !errors.Is(err, ErrFormat) {
			t.Errorf("Decode(%s) = %v, want ErrFormat", b, err)
		}
	}
}
