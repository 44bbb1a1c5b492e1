package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay"
)

// River used as an outbox, the way its users do: a job per event inserted
// in the business transaction, and a worker that publishes it through the
// same Kafka publisher as the relay and returns, so River marks the job
// completed. Ordered is one worker (jobs are fetched in id order and run
// one at a time); unordered is riverUnorderedWorkers of them, which is
// fastest and gives up per-aggregate order. Both with the settings that
// give River its best drain: fetches as often as it allows
// (FetchCooldownMin, a 10 ms poll), completed jobs kept (no cleaner in
// the drain), the rest River's defaults (its batch completer).
const riverUnorderedWorkers = 64

// riverEvent is the job: the event as the relay would publish it.
type riverEvent struct {
	ID          uuid.UUID       `json:"id"`
	Topic       string          `json:"topic"`
	AggregateID string          `json:"aggregate_id"`
	Type        string          `json:"type"`
	Payload     json.RawMessage `json:"payload"`
}

func (riverEvent) Kind() string { return "txoutbox_bench_event" }

// riverPublisher publishes each job's event and counts the acknowledged.
type riverPublisher struct {
	river.WorkerDefaults[riverEvent]
	pub   message.Publisher
	acked *atomic.Int64
}

func (w *riverPublisher) Work(_ context.Context, job *river.Job[riverEvent]) error {
	a := job.Args
	ev := txoutbox.Event{ID: a.ID, Topic: a.Topic, AggregateType: "bench", AggregateID: a.AggregateID, Type: a.Type,
		ContentType: "application/json", Payload: a.Payload, CreatedAt: job.CreatedAt}
	if err := w.pub.Publish(a.Topic, relay.Message(ev)); err != nil {
		return err
	}
	w.acked.Add(1)
	return nil
}

// runRiver drains a backlog of e.opts.events jobs (-river1-events with one
// worker) with workers River workers and reads the topic back.
func runRiver(ctx context.Context, e *env, workers int) (throughput, error) {
	name := fmt.Sprintf("river%d", workers)
	s, err := e.newSchema(ctx, name)
	if err != nil {
		return throughput{}, err
	}
	defer s.close()
	pool, err := pgxpool.New(ctx, s.URL)
	if err != nil {
		return throughput{}, err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	mig, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: s.Schema})
	if err != nil {
		return throughput{}, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return throughput{}, fmt.Errorf("river: migrate: %w", err)
	}
	topic, err := e.topic(ctx, "bench."+name)
	if err != nil {
		return throughput{}, err
	}
	n := e.opts.events
	if workers == 1 {
		n = e.opts.river1Events
	}
	if err := insertRiverBacklog(ctx, pool, s, topic, n, e.opts.aggregates); err != nil {
		return throughput{}, err
	}
	kafka, err := e.loopPublisher()
	if err != nil {
		return throughput{}, err
	}
	defer kafka.Close()
	var acked atomic.Int64
	w := river.NewWorkers()
	if err := river.AddWorkerSafely(w, &riverPublisher{pub: kafka, acked: &acked}); err != nil {
		return throughput{}, err
	}
	client, err := river.NewClient(driver, &river.Config{
		Schema:                      s.Schema,
		Queues:                      map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:                     w,
		FetchCooldown:               river.FetchCooldownMin,
		FetchPollInterval:           10 * time.Millisecond,
		CompletedJobRetentionPeriod: 24 * time.Hour,
		Logger:                      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return throughput{}, err
	}
	m := e.startMeter(ctx, s.SQL)
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return throughput{}, err
	}
	for deadline := start.Add(e.opts.timeout); acked.Load() < int64(n); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			inc := &incompleteError{Published: acked.Load(), Backlog: int64(n), Elapsed: time.Since(start), Err: ctx.Err()}
			_ = client.Stop(context.WithoutCancel(ctx))
			return throughput{}, fmt.Errorf("%s: %w", name, inc)
		}
	}
	// Stop returns once the completer recorded every finished job, as the
	// relay's drain ends when every row is marked.
	if err := client.Stop(ctx); err != nil {
		return throughput{}, err
	}
	took := time.Since(start)
	c := m.stop(ctx, n)
	var open int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{s.Schema, "river_job"}.Sanitize()+` WHERE state <> 'completed'`).Scan(&open); err != nil {
		return throughput{}, err
	}
	if open != 0 {
		return throughput{}, fmt.Errorf("river: %d jobs not completed after the drain", open)
	}
	res := newThroughput(name, n, took, map[string]any{"workers": workers, "fetch_cooldown": river.FetchCooldownMin.String(),
		"fetch_poll_interval": "10ms", "river": "v0.51.2", "publisher": "kafkapub.Publisher.Publish, one event per job"})
	res.Cost = c
	return e.withDelivery(ctx, res, topic)
}

// insertRiverBacklog inserts n jobs, walTxEvents per transaction, as a
// service would in its business transactions, then vacuums and analyzes
// River's table and checkpoints, as the outbox backlogs are.
func insertRiverBacklog(ctx context.Context, pool *pgxpool.Pool, s *schemaDB, topic string, n, aggregates int) error {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: s.Schema})
	if err != nil {
		return err
	}
	for done := 0; done < n; done += walTxEvents {
		params := make([]river.InsertManyParams, 0, walTxEvents)
		for i := done; i < min(done+walTxEvents, n); i++ {
			ev := benchEvent(topic, i, aggregates)
			params = append(params, river.InsertManyParams{Args: riverEvent{ID: ev.ID, Topic: ev.Topic, AggregateID: ev.AggregateID,
				Type: ev.Type, Payload: ev.Payload}})
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := client.InsertManyFastTx(ctx, tx, params); err != nil {
			_ = tx.Rollback(ctx)
			return fmt.Errorf("river: insert jobs: %w", err)
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{s.Schema, "river_job"}.Sanitize()); err != nil {
		return err
	}
	checkpoint(ctx, s.SQL)
	return nil
}
