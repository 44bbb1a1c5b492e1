package entoutbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/entoutbox"
	"github.com/txoutbox/txoutbox/internal/entest"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// BenchmarkCreate measures the write-path overhead of the mixin: Create of
// one Order (with its change event) against Create of one Plain, the same
// fields without the mixin, each in its own transaction, on one database.
func BenchmarkCreate(b *testing.B) {
	bb := setup(b, testkit.Postgres)
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		create func(*entest.Tx) error
	}{{"without_mixin", createPlain(ctx)}, {"with_mixin", createOrder(ctx)}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := entoutbox.WithTx(ctx, bb.client, c.create); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// createPlain and createOrder are the creates the benchmarks compare: the
// same fields, without the mixin and with it.
func createPlain(ctx context.Context) func(*entest.Tx) error {
	return func(tx *entest.Tx) error { return tx.Plain.Create().SetTotal(1250).SetNote("gift").Exec(ctx) }
}

func createOrder(ctx context.Context) func(*entest.Tx) error {
	return func(tx *entest.Tx) error { return tx.Order.Create().SetTotal(1250).SetNote("gift").Exec(ctx) }
}

// BenchmarkCreateOverhead alternates the two transactions of BenchmarkCreate
// in one loop, so load on the machine hits both alike, and reports their
// mean times and ratio, and a third: the plain create plus Emit of an
// event like the change event.
func BenchmarkCreateOverhead(b *testing.B) {
	bb := setup(b, testkit.Postgres)
	ctx := context.Background()
	plain, order := createPlain(ctx), createOrder(ctx)
	// The same event written explicitly, to separate the cost of the
	// outbox row itself from the hook's.
	ev, err := txoutbox.NewEvent("orders", "order", "1", "order.created", map[string]any{"total": 1250, "note": "gift"})
	if err != nil {
		b.Fatal(err)
	}
	emit := func(tx *entest.Tx) error {
		if err := plain(tx); err != nil {
			return err
		}
		e := ev
		e.ID = uuid.Nil
		return entoutbox.Emit(ctx, tx, e)
	}
	var without, with, emitted time.Duration
	for b.Loop() {
		for _, run := range []struct {
			fn  func(*entest.Tx) error
			sum *time.Duration
		}{{plain, &without}, {order, &with}, {emit, &emitted}} {
			start := time.Now()
			if err := entoutbox.WithTx(ctx, bb.client, run.fn); err != nil {
				b.Fatal(err)
			}
			*run.sum += time.Since(start)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(without.Microseconds())/n, "µs/create-without")
	b.ReportMetric(float64(with.Microseconds())/n, "µs/create-with")
	b.ReportMetric(float64(emitted.Microseconds())/n, "µs/create+emit")
	b.ReportMetric(float64(with)/float64(without), "ratio")
}
