package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/claimcheck"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// largeDirectMaxBytes is the direct side's limit, producer and topic:
// room for a -large-bytes event of up to 4 MiB less its headers.
const largeDirectMaxBytes = 4<<20 + 64<<10

// largeBench is one side of the large scenario: a drain of -large-events
// events of -large-bytes each, then a paced run for its latency.
type largeBench struct {
	Scenario string         `json:"scenario"`
	Mode     string         `json:"mode"` // direct, claimcheck (S3) or claimcheck-file
	Events   int            `json:"events"`
	Bytes    int            `json:"bytes_per_event"`
	Seconds  float64        `json:"seconds"`
	MBPS     float64        `json:"mb_per_s"`
	Cost     *cost          `json:"cost,omitempty"`
	CPUMSMB  float64        `json:"cpu_ms_per_mb"`                     // relay, PostgreSQL, broker and (claimcheck) the S3 server
	MotoMSMB *float64       `json:"s3_server_cpu_ms_per_mb,omitempty"` // moto's share
	Rate     int            `json:"latency_rate_per_s"`
	P50MS    float64        `json:"p50_ms"`
	P99MS    float64        `json:"p99_ms"`
	Settings map[string]any `json:"settings"`
}

// The large scenario's sides.
const (
	largeDirect    = "direct"          // the bytes as they are, to a topic that takes them
	largeS3        = "claimcheck"      // the claim check on the S3 server of .ci/services (moto)
	largeFileStore = "claimcheck-file" // the claim check on a directory of this host
)

// runLarge measures events of -large-bytes through the claim check (the
// payload to a store, and a reference to a topic of Kafka's default limit)
// or, in mode largeDirect, the same bytes published as they are to a topic
// that takes them (max.message.bytes raised): the physical neighbour. The
// store is the S3 server of .ci/services (moto), or in mode largeFileStore
// a directory on this host's disk: the claim check's own cost, without an
// S3 server's on the same cores. It drains a backlog for bytes/s and CPU
// per MB, then writes at -large-rate for the p99 from commit to ack.
func runLarge(ctx context.Context, e *env, mode string) (largeBench, error) {
	claim := mode != largeDirect
	n, size := e.opts.largeEvents, e.opts.largeBytes
	s, err := e.newSchema(ctx, "large_"+mode)
	if err != nil {
		return largeBench{}, err
	}
	defer s.close()
	topic := "bench.large." + mode
	topicCfg := map[string]string{}
	if !claim {
		topicCfg["max.message.bytes"] = strconv.Itoa(largeDirectMaxBytes)
	}
	if err := e.largeTopic(ctx, topic, topicCfg); err != nil {
		return largeBench{}, err
	}
	cfg := e.relayConfig()
	maxBytes := largeDirectMaxBytes
	var motoPID int
	if claim {
		maxBytes = 0 // Kafka's default: the claim check takes the rest
		store, pid, err := largeStore(ctx, mode)
		if err != nil {
			return largeBench{}, err
		}
		defer store.Close()
		cfg.LargePayloads = relay.LargePayloadsConfig{Store: store.Store}
		motoPID = pid
	}
	newPub := func() (message.Publisher, error) { return e.newKafkaPublisherMax(e.relayLinger(), maxBytes) }

	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: s.Table, MaxPayloadBytes: size + 1<<20})
	if err != nil {
		return largeBench{}, err
	}
	body := make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{7}).Read(body)
	event := func(i int) txoutbox.Event {
		p := append([]byte(fmt.Sprintf("%08d", i)), body[8:]...) // the same bytes on both sides, each event its own
		return txoutbox.Event{ID: uuid.Must(uuid.NewV7()), Topic: topic, AggregateType: "doc", AggregateID: fmt.Sprintf("doc-%d", i%e.opts.aggregates),
			Type: "doc.stored", ContentType: "application/octet-stream", Payload: p}
	}
	for i := 0; i < n; i += 8 {
		var evs []txoutbox.Event
		for j := i; j < min(i+8, n); j++ {
			evs = append(evs, event(j))
		}
		if err := commitEvents(ctx, s, w, evs); err != nil {
			return largeBench{}, err
		}
	}
	checkpoint(ctx, s.SQL)

	p, err := newPoller(ctx, s)
	if err != nil {
		return largeBench{}, err
	}
	defer p.close()
	m := e.startMeter(ctx, s.SQL).exclude(p.pid)
	moto0, motoErr := processCPU(motoPID)
	rr := relayRun{replicas: 1, cfg: cfg, publisher: newPub}
	if e.opts.cpuprofile != "" {
		rr.cpuprofile = e.opts.cpuprofile + "." + mode // the drain's
	}
	took, err := rr.drain(ctx, s, p, e.opts.timeout)
	if err != nil {
		return largeBench{}, fmt.Errorf("large %s: %w", mode, err)
	}
	c := m.stop(ctx, n)
	mb := float64(n) * float64(size) / (1 << 20)
	res := largeBench{Scenario: "large", Mode: mode, Events: n, Bytes: size, Seconds: took.Seconds(), MBPS: mb / took.Seconds(), Cost: c,
		Settings: e.producerSettings(relaySettings(cfg, 1))}
	if c.TotalUS != nil {
		res.CPUMSMB = *c.TotalUS * float64(n) / 1000 / mb
	}
	if claim && motoErr == nil {
		if moto1, err := processCPU(motoPID); err == nil {
			v := float64((moto1 - moto0).Microseconds()) / 1000 / mb
			res.MotoMSMB = &v
			res.CPUMSMB += v
		}
	}
	res.Settings["topic_max_message_bytes"] = topicCfg["max.message.bytes"]
	res.Settings["producer_max_message_bytes"] = maxBytes

	// The latency: events committed at -large-rate while the relay runs.
	rate := e.opts.largeRate
	k := rate * 10
	pub, err := newPub()
	if err != nil {
		return largeBench{}, err
	}
	acks := &ackRecorder{Publisher: pub, at: map[string]time.Time{}}
	defer acks.Close()
	lr := relayRun{replicas: 1, cfg: cfg, publisher: func() (message.Publisher, error) { return nopCloser{acks}, nil }}
	runCtx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	relayDone := make(chan error, 1)
	go func() { relayDone <- lr.runUntil(runCtx, s) }()
	time.Sleep(500 * time.Millisecond) // the relay's first heartbeat takes its shards
	commits, _, err := paceCommits(rate, k, func(i int) (uuid.UUID, error) {
		ev := event(n + i)
		return ev.ID, commitEvents(ctx, s, w, []txoutbox.Event{ev})
	})
	if err != nil {
		return largeBench{}, err
	}
	if err := acks.waitFor(k, time.Minute); err != nil {
		return largeBench{}, fmt.Errorf("large %s latency: %w", mode, err)
	}
	stopRelay()
	if err := <-relayDone; err != nil {
		return largeBench{}, err
	}
	lat, err := acks.latencies(commits)
	if err != nil {
		return largeBench{}, fmt.Errorf("large %s latency: %w", mode, err)
	}
	res.Rate, res.P50MS, res.P99MS = rate, quantile(lat, 0.5), quantile(lat, 0.99)
	return res, nil
}

// commitEvents writes evs in one transaction of s.
func commitEvents(ctx context.Context, s *schemaDB, w *txoutbox.Writer, evs []txoutbox.Event) error {
	tx, err := s.SQL.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after the commit
	if err := w.Write(ctx, tx, evs...); err != nil {
		return fmt.Errorf("large: write: %w", err)
	}
	return tx.Commit()
}

// largeTopic makes topic empty with configs: on the real cluster afresh
// (recreateTopic), on kfake once.
func (e *env) largeTopic(ctx context.Context, topic string, configs map[string]string) error {
	if e.real {
		return e.recreateTopic(ctx, topic, configs)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return kafkatest.CreateTopic(ctx, e.brokers, topic, int32(e.opts.partitions), 1, configs)
}

// largeStore opens a fresh bucket on the S3 server of .ci/services and
// returns its store and the server's pid (0 when it is not this host's
// moto), whose CPU the claim check's cost includes; or, in mode
// largeFileStore, a store on a fresh directory, removed when the store is
// closed.
func largeStore(ctx context.Context, mode string) (*largeStoreCloser, int, error) {
	if mode == largeFileStore {
		dir, err := os.MkdirTemp("", "bench-large-")
		if err != nil {
			return nil, 0, err
		}
		store, err := claimcheck.Open(ctx, "file://"+dir, claimcheck.Config{})
		if err != nil {
			os.RemoveAll(dir)
			return nil, 0, err
		}
		return &largeStoreCloser{Store: store, dir: dir}, 0, nil
	}
	s3, err := testkit.FindS3(ctx)
	if err != nil {
		return nil, 0, err
	}
	s3.Setenv()
	bucket, err := s3.NewBucket(ctx, "bench")
	if err != nil {
		return nil, 0, err
	}
	store, err := claimcheck.Open(ctx, s3.StoreURL(bucket), claimcheck.Config{})
	if err != nil {
		return nil, 0, err
	}
	pid := 0
	if b, err := os.ReadFile(filepath.Join(kafkatest.ServicesDir(), "s3", "pid")); err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	return &largeStoreCloser{Store: store}, pid, nil
}

// largeStoreCloser is a store whose Close removes its directory, if any.
type largeStoreCloser struct {
	*claimcheck.Store
	dir string
}

func (s *largeStoreCloser) Close() error {
	err := s.Store.Close()
	if s.dir != "" {
		err = errors.Join(err, os.RemoveAll(s.dir))
	}
	return err
}

// newKafkaPublisherMax is newKafkaPublisher with a producer limit of
// maxBytes (0: kafkapub's default, Kafka's).
func (e *env) newKafkaPublisherMax(linger time.Duration, maxBytes int) (message.Publisher, error) {
	cfg := kafkapub.Config{ClientID: "bench", Compression: e.opts.compression, Linger: linger, MaxMessageBytes: maxBytes}
	pub, err := kafkapub.NewPublisher(e.brokers, cfg)
	if err != nil {
		return nil, fmt.Errorf("kafka publisher: %w", err)
	}
	return pub, nil
}
