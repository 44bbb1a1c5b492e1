package entoutbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/txoutbox/txoutbox/entoutbox"
	"github.com/txoutbox/txoutbox/internal/entest"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// 32 writers commit or roll back at once; each committed order has exactly
// its own events, in order, and a rolled-back one has none.
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng)
		ctx := context.Background()
		const writers = 32
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := entoutbox.WithTx(ctx, b.client, func(tx *entest.Tx) error {
					o, err := tx.Order.Create().SetTotal(int64(i)).Save(ctx)
					if err != nil {
						return err
					}
					if err := tx.Order.UpdateOne(o).SetStatus("paid").Exec(ctx); err != nil {
						return err
					}
					if i%4 == 3 {
						return errAbort
					}
					return nil
				})
				if err != nil && !errors.Is(err, errAbort) {
					errs <- fmt.Errorf("writer %d: %w", i, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}

		orders := map[string]int64{} // id -> total
		rows, err := b.db.SQL.Query(`SELECT id, total FROM orders`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id, total int64
			if err := rows.Scan(&id, &total); err != nil {
				t.Fatal(err)
			}
			orders[fmt.Sprint(id)] = total
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		if len(orders) != writers*3/4 {
			t.Errorf("%d orders committed, want %d", len(orders), writers*3/4)
		}
		events := map[string][]string{}
		for _, r := range b.outbox(t) {
			events[r.AggregateID] = append(events[r.AggregateID], r.Type)
		}
		for id, total := range orders {
			if total%4 == 3 {
				t.Errorf("order %s (writer %d) committed though its writer rolled back", id, total)
			}
			if got := fmt.Sprint(events[id]); got != "[order.created order.updated]" {
				t.Errorf("order %s has events %s, want [order.created order.updated]", id, got)
			}
		}
		for id := range events {
			if _, ok := orders[id]; !ok {
				t.Errorf("events %v for order %s, which did not commit", events[id], id)
			}
		}
	})
}
