package main

import (
	"context"
	"github.com/txoutbox/txoutbox"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// startRelay runs a relay on the outbox, publishing to a fresh kfake broker,
// until the test ends, and returns the broker addresses.
func (e *opsEnv) startRelay(t *testing.T) []string {
	t.Helper()
	brokers := kafkatest.New(t).ListenAddrs()
	pub, err := kafkapub.NewPublisher(brokers, kafkapub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(e.db.SQL, pub, relay.Config{
		Table:             e.db.Table(),
		PollInterval:      50 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
		StaleAfter:        time.Second,
		LeaseDuration:     2 * time.Second,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay Run: %v", err)
		}
		pub.Close()
	})
	return brokers
}

// record is one Kafka record read back: its key and event id header.
type record struct{ key, eventID string }

// readTopic reads topic from the start until it holds n records.
func readTopic(t *testing.T, brokers []string, topic string, n int) []record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []record
	err := kafkatest.Consume(ctx, brokers, []string{topic}, 0, func(r *kgo.Record) bool {
		out = append(out, record{key: string(r.Key), eventID: kafkatest.Header(r, txoutbox.HeaderEventID)})
		return len(out) < n
	})
	if err != nil {
		t.Fatalf("read %d records of %s, want %d: %v: %v", len(out), topic, n, err, out)
	}
	return out
}
