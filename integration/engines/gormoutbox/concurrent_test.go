package gormoutbox_test

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/txoutbox/txoutbox/gormoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// TestConcurrentOrders runs 32 goroutines that create, pay and sometimes
// abort orders at once, then checks every committed order has exactly its
// own events, in order, and aborted ones have none.
func TestConcurrentOrders(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		sqlDB, _ := b.db.DB()
		sqlDB.SetMaxOpenConns(16)
		const workers, perWorker = 32, 8

		var (
			mu      sync.Mutex
			want    = map[uint][]string{}
			aborted []uint
			wg      sync.WaitGroup
			errs    = make(chan error, workers)
		)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perWorker; i++ {
					o := Order{Total: int64(w*100 + i)}
					o.Place()
					if err := b.db.Create(&o).Error; err != nil {
						errs <- err
						return
					}
					evs := []string{"order.placed"}
					abort := (w+i)%4 == 0
					err := b.db.Transaction(func(tx *gorm.DB) error {
						o.Pay()
						if err := tx.Save(&o).Error; err != nil {
							return err
						}
						if abort {
							return errAbort
						}
						o.Record("order.shipped", map[string]int{"worker": w})
						return tx.Model(&o).Update("status", "shipped").Error
					})
					if err != nil && !errors.Is(err, errAbort) {
						errs <- err
						return
					}
					if !abort {
						evs = append(evs, "order.paid", "order.shipped")
					}
					mu.Lock()
					want[o.ID] = evs
					if abort {
						aborted = append(aborted, o.ID)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}

		got := map[uint][]string{}
		total := 0
		for _, e := range b.events() {
			var id uint
			if _, err := fmt.Sscan(e.AggregateID, &id); err != nil {
				t.Fatalf("aggregate id %q: %v", e.AggregateID, err)
			}
			got[id] = append(got[id], e.Type)
			total++
		}
		if len(want) != workers*perWorker {
			t.Fatalf("%d orders tracked, want %d", len(want), workers*perWorker)
		}
		ids := make([]int, 0, len(want))
		for id := range want {
			ids = append(ids, int(id))
		}
		sort.Ints(ids)
		wantTotal := 0
		for _, id := range ids {
			w, g := want[uint(id)], got[uint(id)]
			wantTotal += len(w)
			if fmt.Sprint(w) != fmt.Sprint(g) {
				t.Errorf("order %d: events %v, want %v", id, g, w)
			}
		}
		if total != wantTotal {
			t.Fatalf("outbox holds %d events, want %d", total, wantTotal)
		}
		var statuses map[string]int
		rows, err := b.raw.Query(`SELECT status, count(*) FROM orders GROUP BY status`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		statuses = map[string]int{}
		for rows.Next() {
			var s string
			var n int
			rows.Scan(&s, &n)
			statuses[s] = n
		}
		if statuses["placed"] != len(aborted) || statuses["shipped"] != workers*perWorker-len(aborted) {
			t.Fatalf("statuses = %v with %d aborted", statuses, len(aborted))
		}
	})
}
