package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox/inbox"
	"github.com/txoutbox/txoutbox/migrations"
)

// WithInbox adds a consumer-side check to a plan: after the verifier, two
// consumers read the whole broker at the same time, so every event arrives
// at least twice (plus the relays' own duplicates), often concurrently, and
// each processes every record through the inbox in the scenario's
// database (PostgreSQL, or MySQL/MariaDB with the inbox's MySQL dialect),
// with an effect (a row in chaos_effects) written in the inbox's
// transaction. Every delivered event must have exactly one effect.
func WithInbox(plan Plan) Plan {
	check := plan.Check
	plan.Name += "+inbox"
	plan.Check = func(ctx context.Context, w *World, res *Result) error {
		if check != nil {
			if err := check(ctx, w, res); err != nil {
				return err
			}
		}
		return inboxCheck(ctx, w, res)
	}
	return plan
}

func inboxCheck(ctx context.Context, w *World, res *Result) error {
	db := w.Env.DB.SQL
	table := w.Env.DB.Table() // on MySQL the connection's database, no schema
	table.Name = inbox.TableNameDefault
	m, err := migrations.New(db, migrations.Config{Set: migrations.Inbox, Table: table})
	if err != nil {
		return err
	}
	if _, err := m.Up(ctx); err != nil {
		return fmt.Errorf("migrate inbox: %w", err)
	}
	effectsTable := `CREATE TABLE chaos_effects (event_id uuid NOT NULL, consumer_run int NOT NULL)`
	if w.Env.MySQL() {
		effectsTable = `CREATE TABLE chaos_effects (event_id CHAR(36) NOT NULL, consumer_run INT NOT NULL) ENGINE = InnoDB`
	}
	if _, err := db.ExecContext(ctx, effectsTable); err != nil {
		return fmt.Errorf("create effects table: %w", err)
	}
	ib, err := inbox.New(inbox.Config{Table: table, Dialect: w.Env.DB.Dialect()})
	if err != nil {
		return err
	}
	// Every topic the verifier read: the operators' scenarios deliver
	// retried events on a topic of their own too.
	topics := dedupe(append([]string{TopicEnt, TopicGorm}, w.topics...))
	var (
		processed, skipped atomic.Int64
		wg                 sync.WaitGroup
		errs               = make([]error, 2)
	)
	for run := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[run] = ReadAll(ctx, w.Broker.Addr(), topics, func(d Delivery) error {
				id, err := uuid.Parse(d.EventID)
				if err != nil {
					return fmt.Errorf("record %s/%d@%d: event id %q: %w", d.Topic, d.Partition, d.Offset, d.EventID, err)
				}
				first, err := ib.Run(ctx, db, "chaos-verifier", id, func(tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, w.Env.q(`INSERT INTO chaos_effects (event_id, consumer_run) VALUES ($1, $2)`), id.String(), run)
					return err
				})
				if err != nil {
					return fmt.Errorf("inbox: %w", err)
				}
				if first {
					processed.Add(1)
				} else {
					skipped.Add(1)
				}
				return nil
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var effects, distinct int
	err = db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT event_id) FROM chaos_effects`).Scan(&effects, &distinct)
	if err != nil {
		return fmt.Errorf("count effects: %w", err)
	}
	w.Env.Logf("%s: inbox: %d records processed by two consumers, %d effects, %d duplicates skipped", res.Scenario, processed.Load()+skipped.Load(), effects, skipped.Load())
	if effects != distinct || distinct != res.DeliveredUnique || int(processed.Load()) != effects {
		return fmt.Errorf("inbox: %d effects for %d distinct events (%d delivered, %d processed): want exactly one effect per delivered event",
			effects, distinct, res.DeliveredUnique, processed.Load())
	}
	if skipped.Load() < int64(res.Records) {
		return fmt.Errorf("inbox: only %d duplicates skipped; two full reads of %d records must skip at least %d", skipped.Load(), res.Records, res.Records)
	}
	return nil
}
