package publish

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
)

// fakeStore keeps offloaded payloads in memory, or fails with err.
type fakeStore struct {
	mu     sync.Mutex
	stored map[string][]byte // by event id
	tables []txoutbox.Table
	err    error
}

func (s *fakeStore) Offload(_ context.Context, table txoutbox.Table, msg *message.Message) (*message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	if s.stored == nil {
		s.stored = map[string][]byte{}
	}
	s.stored[msg.UUID] = bytes.Clone(msg.Payload)
	s.tables = append(s.tables, table)
	ref := message.NewMessage(msg.UUID, nil)
	for k, v := range msg.Metadata {
		ref.Metadata.Set(k, v)
	}
	ref.Metadata.Set("ref", msg.UUID)
	return ref, nil
}

// sink records every message it is handed; a BatchPublisher when batch.
type sink struct {
	mu   sync.Mutex
	msgs []*message.Message
}

func (p *sink) Publish(_ string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, msgs...)
	return nil
}

func (p *sink) Close() error { return nil }

type batchSink struct{ sink }

func (p *batchSink) PublishBatch(_ []string, msgs []*message.Message) []error {
	_ = p.Publish("", msgs...)
	return nil
}

type limitedSink struct {
	sink
	limit int
}

func (p *limitedSink) MaxRecordBytes() int { return p.limit }

func sized(t *testing.T, n int, topics ...string) []*txoutbox.Event {
	t.Helper()
	evs := events(t, topics...)
	for _, e := range evs {
		e.Payload = []byte(`"` + strings.Repeat("x", n) + `"`)
	}
	return evs
}

// An event whose record passes the threshold is published as the store's
// reference, its payload stored first; smaller ones go out unchanged, in
// both Publish and PublishBatch calls.
func TestLargePayloadsAreOffloadedOverTheThreshold(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		store := &fakeStore{}
		var pub interface {
			message.Publisher
			recorded() []*message.Message
		}
		if batch {
			pub = &batchSink{}
		} else {
			pub = &sink{}
		}
		table := txoutbox.Table{Schema: "s", Name: "t"}
		c := newCore(t, Config{Publisher: pub, LaneBatch: 8, Table: table, LargePayloads: store, LargePayloadsOver: 4096})
		evs := append(sized(t, 100, "small"), sized(t, 5000, "large")...)
		if errs := c.Send(context.Background(), evs); errs != nil {
			t.Fatalf("batch %v: %v", batch, errs)
		}
		got := pub.recorded()
		if len(got) != 2 {
			t.Fatalf("batch %v: %d messages published, want 2", batch, len(got))
		}
		if !bytes.Equal(got[0].Payload, evs[0].Payload) || got[0].Metadata.Get("ref") != "" {
			t.Errorf("batch %v: the small event was not published unchanged", batch)
		}
		if got[1].Metadata.Get("ref") != evs[1].ID.String() || len(got[1].Payload) != 0 ||
			got[1].Metadata.Get(txoutbox.HeaderAggregateID) != evs[1].AggregateID {
			t.Errorf("batch %v: the large event went out as %v, want the store's reference with its metadata", batch, got[1].Metadata)
		}
		if !bytes.Equal(store.stored[evs[1].ID.String()], evs[1].Payload) || len(store.stored) != 1 || store.tables[0] != table {
			t.Errorf("batch %v: stored %d payloads (tables %v), want the large one's, under its table", batch, len(store.stored), store.tables)
		}
	}
}

func (p *sink) recorded() []*message.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.msgs
}

// A store that fails fails only the events it was to store, with an error
// not marked permanent (an outage, never the event's fault); the others of
// the call are published.
func TestLargePayloadStoreFailureFailsOnlyItsEvent(t *testing.T) {
	t.Parallel()
	away := errors.New("store away")
	pub := &batchSink{}
	c := newCore(t, Config{Publisher: pub, LaneBatch: 8, LargePayloads: &fakeStore{err: away}, LargePayloadsOver: 4096})
	evs := append(sized(t, 100, "a"), append(sized(t, 5000, "b"), sized(t, 100, "c")...)...)
	errs := c.Send(context.Background(), evs)
	if len(errs) != 3 || errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], away) || !strings.Contains(errs[1].Error(), evs[1].ID.String()) {
		t.Fatalf("errors %v: want the large event's only, naming it and wrapping the store's", errs)
	}
	var p interface{ Permanent() bool }
	if errors.As(errs[1], &p) && p.Permanent() {
		t.Fatalf("a store failure was marked permanent: %v", errs[1])
	}
	if got := pub.recorded(); len(got) != 2 || got[0].UUID != evs[0].ID.String() || got[1].UUID != evs[2].ID.String() {
		t.Fatalf("published %d messages, want the two small ones", len(got))
	}
	one := newCore(t, Config{Publisher: &sink{}, LargePayloads: &fakeStore{err: away}, LargePayloadsOver: 4096})
	if errs := one.Send(context.Background(), evs[1:2]); len(errs) != 1 || !errors.Is(errs[0], away) {
		t.Fatalf("one event per Publish: errors %v, want the store's", errs)
	}
}

// The threshold defaults to three quarters of what the publisher reports,
// else LargePayloadsOverDefault; one not under the publisher's limit is
// refused.
func TestLargePayloadsOver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		over int
		pub  message.Publisher
		want int
		bad  bool
	}{
		{0, &sink{}, LargePayloadsOverDefault, false},
		{0, &limitedSink{limit: 1048588}, 1048588 / 4 * 3, false},
		{5000, &sink{}, 5000, false},
		{5000, &limitedSink{limit: 1 << 20}, 5000, false},
		{1 << 20, &limitedSink{limit: 1 << 20}, 0, true},
	} {
		got, err := LargePayloadsOver(tc.over, tc.pub)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("LargePayloadsOver(%d, %T) = %d, %v; want %d, error %v", tc.over, tc.pub, got, err, tc.want, tc.bad)
		}
	}
}
