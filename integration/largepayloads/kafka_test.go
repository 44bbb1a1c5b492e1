package largepayloads

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/claimcheck"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// topicMaxBytes is the real cluster's topics' max.message.bytes in these
// tests: Kafka's default, about 1 MB.
const topicMaxBytes = "1048588"

// The sizes each aggregate writes, in order: large payloads between small
// events of the same aggregate. One 50 MB payload is enough to show it
// passes; more would only fill the machine's memory.
var clusterSizes = [][]int{
	{100, 5 << 20, 100, 50 << 20, 100},
	{100, 5 << 20, 100, 5 << 20, 100},
}

// 5 MB and 50 MB payloads through the real 3-broker cluster, whose topic
// refuses records over 1 MB, and the S3 server: they arrive byte-identical
// through the claim check's middleware, in order per aggregate with the
// small events of the same aggregates, in both relay modes.
func TestLargePayloadsThroughKafkaCluster(t *testing.T) {
	t.Parallel() // the cluster shared, a topic and a schema of its own
	kafkatest.LockCluster(t, false)
	brokers := kafkatest.Cluster(t)
	store, err := claimcheck.Open(context.Background(), testkit.S3Server(t).Bucket(t), claimcheck.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	for _, mode := range []string{"polling", "wal"} {
		t.Run(mode, func(t *testing.T) { // one after the other: each holds 65 MB of payloads in memory a few times over
			if mode == "wal" {
				testkit.RequireLogical(t)
			}
			db := testkit.NewOutbox(t)
			topic := "txoutbox_" + db.Schema
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := kafkatest.CreateTopic(ctx, brokers, topic, 3, 3, map[string]string{"max.message.bytes": topicMaxBytes}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = kafkatest.DeleteTopics(context.Background(), brokers, topic) })
			requireRefused(t, brokers, topic, 2<<20)

			pub, err := kafkapub.NewPublisher(brokers, kafkapub.Config{}) // the default limit: Kafka's
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pub.Close() })
			cfg := fastConfig(db, store)
			cfg.LeaseDuration = time.Minute // a 50 MB upload and publish on a loaded machine
			if mode == "wal" {
				runWALRelay(t, db, pub, store)
			} else {
				runRelay(t, db, pub, cfg)
			}
			wrote := writeSizes(t, db, topic, clusterSizes, kafkapub.MaxMessageBytesDefault/4*3)
			got := consumeThrough(t, brokers, topic, claimcheck.Middleware(store), len(wrote))
			checkDelivered(t, wrote, got)
		})
	}
}

// requireRefused checks the test's premise: the topic refuses a record of
// size random bytes sent as they are (uncompressed).
func requireRefused(t *testing.T, brokers []string, topic string, size int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(int32(size)*2),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	value := make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(value)
	// A broker may not know the topic yet a moment after its creation:
	// try again until it answers for the record.
	testkit.Eventually(30*time.Second, func() bool {
		err = cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("premise"), Value: value}).FirstErr()
		return err == nil || errors.Is(err, kerr.MessageTooLarge)
	})
	if !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("a %d-byte record to %s (max.message.bytes %s): %v, want MESSAGE_TOO_LARGE", size, topic, topicMaxBytes, err)
	}
}

// writeSizes commits, for each aggregate i, events of sizes[i] bytes of
// random binary payload, in order: round j holds each aggregate's j-th
// event, one transaction per round. Events over over bytes count as large
// (sent by reference).
func writeSizes(t *testing.T, db *testkit.DB, topic string, sizes [][]int, over int) []written {
	t.Helper()
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: db.Table(), MaxPayloadBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{42})
	var out []written
	for seq := 0; ; seq++ {
		var events []txoutbox.Event
		for a, agg := range sizes {
			if seq >= len(agg) {
				continue
			}
			id := fmt.Sprintf("agg-%d", a)
			payload := make([]byte, agg[seq])
			_, _ = rng.Read(payload)
			e := txoutbox.Event{ID: uuid.Must(uuid.NewV7()), Topic: topic, AggregateType: "doc", AggregateID: id,
				Type: "doc.stored", ContentType: "application/octet-stream", Payload: payload}
			events = append(events, e)
			out = append(out, written{id: e.ID.String(), aggregate: id, seq: seq, payload: payload, large: len(payload) > over})
		}
		if len(events) == 0 {
			return out
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		testkit.Commit(t, ctx, db.SQL, w, events...)
		cancel()
	}
}

// consumeThrough reads topic until it holds want records, passing each,
// as a Watermill message, through mw (the claim check's middleware), as a
// router would, and records what the handler gets.
func consumeThrough(t *testing.T, brokers []string, topic string, mw message.HandlerMiddleware, want int) []received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out []received
	err := kafkatest.Consume(ctx, brokers, []string{topic}, 0, func(r *kgo.Record) bool {
		msg := message.NewMessage(kafkatest.Header(r, txoutbox.HeaderEventID), r.Value)
		for _, h := range r.Headers {
			msg.Metadata.Set(h.Key, string(h.Value))
		}
		msg.SetContext(ctx)
		reference := claimcheck.IsReference(msg.Metadata)
		_, err := mw(func(m *message.Message) ([]*message.Message, error) {
			if claimcheck.IsReference(m.Metadata) {
				return nil, fmt.Errorf("the handler got a reference: %v", m.Metadata)
			}
			out = append(out, received{id: m.UUID, aggregate: string(r.Key), payload: bytes.Clone(m.Payload), reference: reference})
			return nil, nil
		})(msg)
		if err != nil {
			t.Errorf("record %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		return len(out) < want && err == nil
	})
	if err != nil {
		t.Fatalf("consumed %d of %d records: %v", len(out), want, err)
	}
	return out
}
