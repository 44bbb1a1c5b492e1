package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/gormoutbox"
	"github.com/txoutbox/txoutbox/relay"
)

// BenchOrder is the GORM model of the latency and write scenarios: an order
// that records one event when placed.
type BenchOrder struct {
	ID     uint `gorm:"primaryKey"`
	Total  int64
	Status string

	gormoutbox.Events `gorm:"-"`
}

// latencyWriters is how many goroutines share the steady write rate, so a
// slow commit does not delay the next one's start.
const latencyWriters = 16

// latency is the result of the latency scenario.
type latency struct {
	Scenario string         `json:"scenario"`
	Mode     string         `json:"mode"`
	Rate     int            `json:"rate_per_s"`
	Events   int            `json:"events"`
	P50MS    float64        `json:"p50_ms"`
	P90MS    float64        `json:"p90_ms"`
	P99MS    float64        `json:"p99_ms"`
	MaxMS    float64        `json:"max_ms"`
	Behind   int            `json:"writes_late_over_10ms"`
	Settings map[string]any `json:"settings"`
}

// runLatency commits events at a steady rate through the GORM plugin while
// one relay publishes them, and measures each event's time from the
// writer's commit returning to the publisher's Publish returning (the
// broker's ack), rate events a second. notify selects LISTEN/NOTIFY, or
// polling only at the relay's default PollInterval (on MySQL, which has no
// NOTIFY, PollIntervalMySQLDefault).
func runLatency(ctx context.Context, e *env, notify bool, rate int) (latency, error) {
	mode := "notify"
	if !notify {
		mode = "poll"
	}
	s, err := e.newSchema(ctx, "latency_"+mode)
	if err != nil {
		return latency{}, err
	}
	defer s.close()
	topic, err := e.topic(ctx, "bench.latency."+mode)
	if err != nil {
		return latency{}, err
	}

	dialector := postgres.Open(s.URL)
	if s.mysql {
		dialector = gormmysql.Open(s.DSN)
	}
	db, err := gorm.Open(dialector, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return latency{}, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return latency{}, err
	}
	defer sqlDB.Close()
	if err := db.AutoMigrate(&BenchOrder{}); err != nil {
		return latency{}, err
	}
	plugin, err := gormoutbox.New(gormoutbox.Config{Writer: txoutbox.WriterConfig{Table: s.Table, DisableNotify: !notify}, DefaultTopic: topic})
	if err != nil {
		return latency{}, err
	}
	if err := db.Use(plugin); err != nil {
		return latency{}, err
	}

	kafka, err := e.kafkaPublisher()
	if err != nil {
		return latency{}, err
	}
	acks := &ackRecorder{Publisher: kafka, at: map[string]time.Time{}}
	defer acks.Close()
	cfg := relay.Config{DisableListen: !notify}
	rr := relayRun{replicas: 1, cfg: cfg, publisher: func() (message.Publisher, error) { return nopCloser{acks}, nil }}

	n := rate * int(e.opts.latencyDuration/time.Second)
	runCtx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	relayDone := make(chan error, 1)
	go func() { relayDone <- rr.runUntil(runCtx, s) }()
	time.Sleep(500 * time.Millisecond) // the relay's first heartbeat takes its shards

	commits, behind, err := paceCommits(rate, n, func(i int) (uuid.UUID, error) {
		ev := benchEvent(topic, i, e.opts.aggregates)
		ev.Topic, ev.AggregateID = "", "" // the plugin fills them from the model
		o := BenchOrder{Total: int64(i), Status: "placed"}
		o.RecordEvent(ev)
		if err := db.WithContext(ctx).Create(&o).Error; err != nil {
			return ev.ID, fmt.Errorf("latency: create: %w", err)
		}
		return ev.ID, nil
	})
	if err != nil {
		return latency{}, err
	}
	if err := acks.waitFor(n, 60*time.Second); err != nil {
		return latency{}, fmt.Errorf("latency %s: %w", mode, err)
	}
	stopRelay()
	if err := <-relayDone; err != nil {
		return latency{}, err
	}

	lat, err := acks.latencies(commits)
	if err != nil {
		return latency{}, fmt.Errorf("latency %s: %w", mode, err)
	}
	settings := s.relaySettings(cfg, 1)
	settings["writers"] = latencyWriters
	settings["writer_notify"] = notify && !s.mysql
	if !notify && !s.mysql {
		settings["poll_interval"] = relay.PollIntervalDefault.String()
	}
	return latency{
		Scenario: "latency", Mode: mode, Rate: rate, Events: len(lat),
		P50MS: quantile(lat, 0.50), P90MS: quantile(lat, 0.90), P99MS: quantile(lat, 0.99), MaxMS: lat[len(lat)-1],
		Behind: behind, Settings: settings,
	}, nil
}

// paceCommits runs commit(i) for i in [0, n) from latencyWriters writers,
// the i-th started no sooner than i/rate seconds in, as a steady stream of
// business transactions; it returns each commit's time by event id, how
// many started more than 10 ms late (every writer was busy), and an error
// if any commit failed.
func paceCommits(rate, n int, commit func(i int) (uuid.UUID, error)) (commits map[uuid.UUID]time.Time, behind int, err error) {
	commits = make(map[uuid.UUID]time.Time, n)
	var (
		mu       sync.Mutex
		late     atomic.Int64
		failures atomic.Int64
		first    error
		wg       sync.WaitGroup
	)
	interval := time.Second / time.Duration(rate)
	start := time.Now().Add(10 * time.Millisecond)
	jobs := make(chan int, n)
	for range latencyWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if time.Since(start.Add(time.Duration(i)*interval)) > 10*time.Millisecond {
					late.Add(1)
				}
				id, err := commit(i)
				at := time.Now()
				mu.Lock()
				if err != nil {
					failures.Add(1)
					first = cmp.Or(first, err)
				} else {
					commits[id] = at
				}
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if f := failures.Load(); f > 0 {
		return commits, int(late.Load()), fmt.Errorf("%d of %d commits failed, the first: %w", f, n, first)
	}
	return commits, int(late.Load()), nil
}

// quantile returns the q-quantile of sorted values (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ackRecorder records when each message's Publish returned, which for
// watermill-kafka is when the broker acknowledged it.
type ackRecorder struct {
	message.Publisher
	mu sync.Mutex
	at map[string]time.Time
}

func (a *ackRecorder) Publish(topic string, msgs ...*message.Message) error {
	if err := a.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	now := time.Now()
	a.mu.Lock()
	for _, m := range msgs {
		if _, ok := a.at[m.UUID]; !ok {
			a.at[m.UUID] = now
		}
	}
	a.mu.Unlock()
	return nil
}

// PublishBatch keeps the relays' batching path: it forwards to the
// publisher's own PublishBatch.
func (a *ackRecorder) PublishBatch(topics []string, msgs []*message.Message) []error {
	errs := publishBatch(a.Publisher, topics, msgs)
	now := time.Now()
	a.mu.Lock()
	for i, m := range msgs {
		if _, ok := a.at[m.UUID]; !ok && (errs == nil || errs[i] == nil) {
			a.at[m.UUID] = now
		}
	}
	a.mu.Unlock()
	return errs
}

// publishBatch publishes through p's PublishBatch when it has one, and
// otherwise one message at a time.
func publishBatch(p message.Publisher, topics []string, msgs []*message.Message) []error {
	if bp, ok := p.(relay.BatchPublisher); ok {
		return bp.PublishBatch(topics, msgs)
	}
	var errs []error
	for i, m := range msgs {
		if err := p.Publish(topics[i], m); err != nil {
			if errs == nil {
				errs = make([]error, len(msgs))
			}
			errs[i] = err
		}
	}
	return errs
}

// latencies returns each committed event's time from its commit to its
// acknowledgement, in milliseconds, sorted; an event not acknowledged is an
// error.
func (a *ackRecorder) latencies(commits map[uuid.UUID]time.Time) ([]float64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	lat := make([]float64, 0, len(commits))
	for id, c := range commits {
		at, ok := a.at[id.String()]
		if !ok {
			return nil, fmt.Errorf("event %s committed but never acknowledged", id)
		}
		lat = append(lat, max(at.Sub(c), 0).Seconds()*1000)
	}
	slices.Sort(lat)
	return lat, nil
}

func (a *ackRecorder) waitFor(n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		a.mu.Lock()
		got := len(a.at)
		a.mu.Unlock()
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d events acknowledged after %s", got, n, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nopCloser keeps relayRun from closing a publisher the scenario owns.
type nopCloser struct{ message.Publisher }

func (nopCloser) Close() error { return nil }

// PublishBatch keeps the relay's batching path (see ackRecorder).
func (p nopCloser) PublishBatch(topics []string, msgs []*message.Message) []error {
	return publishBatch(p.Publisher, topics, msgs)
}
