package entoutbox_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/entoutbox"
	"github.com/txoutbox/txoutbox/internal/entest"
	"github.com/txoutbox/txoutbox/internal/entest/order"
	"github.com/txoutbox/txoutbox/internal/entest/plain"
	"github.com/txoutbox/txoutbox/internal/entest/schema"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

var errAbort = errors.New("abort on purpose")

func created(id int, fields string) outboxRow {
	return outboxRow{"orders", "order", fmt.Sprint(id), "order.created", fmt.Sprintf(`{"id":%d,"fields":%s}`, id, fields)}
}

func TestCreateCommitWritesBothRows(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng)
		ctx := context.Background()
		var o *entest.Order
		err := entoutbox.WithTx(ctx, b.client, func(tx *entest.Tx) error {
			var err error
			o, err = tx.Order.Create().SetTotal(1250).SetNote("gift").SetSecret("s3cret").Save(ctx)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := b.count(t, "orders"); n != 1 {
			t.Fatalf("%d orders, want 1", n)
		}
		// The sensitive field stays out of the payload.
		wantOutbox(t, b.outbox(t), created(o.ID, `{"note":"gift","status":"placed","total":1250}`))
	})
}

func TestRollbackWritesNeither(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng)
		ctx := context.Background()
		err := entoutbox.WithTx(ctx, b.client, func(tx *entest.Tx) error {
			if _, err := tx.Order.Create().SetTotal(1).Save(ctx); err != nil {
				return err
			}
			return errAbort
		})
		if !errors.Is(err, errAbort) || err.Error() != errAbort.Error() {
			t.Fatalf("err = %v, want fn's error as is", err)
		}
		if n := b.count(t, "orders"); n != 0 {
			t.Errorf("%d orders, want 0", n)
		}
		wantOutbox(t, b.outbox(t))
	})
}

func TestPanicRollsBackAndRepanics(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng)
		ctx := context.Background()
		func() {
			defer func() {
				if p := recover(); p != "boom" {
					t.Errorf("recovered %v, want boom", p)
				}
			}()
			_ = entoutbox.WithTx(ctx, b.client, func(tx *entest.Tx) error {
				if _, err := tx.Order.Create().SetTotal(1).Save(ctx); err != nil {
					return err
				}
				panic("boom")
			})
		}()
		if n := b.count(t, "orders"); n != 0 {
			t.Errorf("%d orders, want 0", n)
		}
		wantOutbox(t, b.outbox(t))
	})
}

func TestOutboxFailureRollsBackEntity(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng)
		ctx := context.Background()
		b.exec(t, `ALTER TABLE outbox RENAME TO outbox_elsewhere`)
		err := entoutbox.WithTx(ctx, b.client, func(tx *entest.Tx) error {
			_, err := tx.Order.Create().SetTotal(1).Save(ctx)
			return err
		})
		missing := `relation "outbox" does not exist`
		if eng == testkit.MySQL {
			missing = "outbox' doesn't exist"
		}
		wantErrContains(t, err, "entoutbox: create Order: txoutbox: insert 1 events into", missing)
		if n := b.count(t, "orders"); n != 0 {
			t.Errorf("%d orders, want 0: the order committed without its event", n)
		}
	})
}

func TestInvalidEventFailsMutation(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng)
		ctx := context.Background()
		// Payment's mixin allows 256-byte payloads; this memo makes it larger
		// (and fits MySQL's VARCHAR(255), ent's type for a string there).
		err := entoutbox.WithTx(ctx, b.client, func(tx *entest.Tx) error {
			_, err := tx.Payment.Create().SetAmount(5).SetMemo(strings.Repeat("x", 250)).Save(ctx)
			return err
		})
		if !errors.Is(err, txoutbox.ErrInvalidEvent) {
			t.Fatalf("err = %v, want ErrInvalidEvent", err)
		}
		wantErrContains(t, err, "entoutbox: create Payment: txoutbox: invalid event 0: Payload:", "over the limit of 256")
		if n := b.count(t, "payments"); n != 0 {
			t.Errorf("%d payments, want 0", n)
		}
		wantOutbox(t, b.outbox(t))
	})
}

func TestCustomEvents(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng)
		ctx := context.Background()
		var p *entest.Payment
		err := entoutbox.WithTx(ctx, b.client, func(tx *entest.Tx) error {
			var err error
			if p, err = tx.Payment.Create().SetAmount(990).SetMemo("card").Save(ctx); err != nil {
				return err
			}
			// Payment's Events ignore updates.
			return tx.Payment.UpdateOne(p).SetMemo("cash").Exec(ctx)
		})
		if err != nil {
			t.Fatal(err)
		}
		wantOutbox(t, b.outbox(t), outboxRow{"payments", "payment", p.ID.String(), "payment.recorded", `{"amount":990,"memo":"card"}`})
	})
}

func TestEveryOperation(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng)
		ctx := context.Background()
		run := func(fn func(tx *entest.Tx) error) []outboxRow {
			t.Helper()
			before := len(b.outbox(t))
			if err := entoutbox.WithTx(ctx, b.client, fn); err != nil {
				t.Fatal(err)
			}
			rows := b.outbox(t)[before:]
			sort.Slice(rows, func(i, j int) bool { return rows[i].AggregateID < rows[j].AggregateID })
			return rows
		}

		var o1 *entest.Order
		got := run(func(tx *entest.Tx) (err error) {
			o1, err = tx.Order.Create().SetTotal(100).Save(ctx)
			return err
		})
		wantOutbox(t, got, created(o1.ID, `{"status":"placed","total":100}`))

		var bulk []*entest.Order
		got = run(func(tx *entest.Tx) (err error) {
			bulk, err = tx.Order.CreateBulk(
				tx.Order.Create().SetTotal(200),
				tx.Order.Create().SetTotal(300),
				tx.Order.Create().SetTotal(400).SetNote("n"),
			).Save(ctx)
			return err
		})
		wantOutbox(t, got,
			created(bulk[0].ID, `{"status":"placed","total":200}`),
			created(bulk[1].ID, `{"status":"placed","total":300}`),
			created(bulk[2].ID, `{"note":"n","status":"placed","total":400}`))

		got = run(func(tx *entest.Tx) error {
			return tx.Order.UpdateOneID(bulk[2].ID).SetStatus("paid").AddTotal(5).ClearNote().SetSecret("x").Exec(ctx)
		})
		wantOutbox(t, got, outboxRow{"orders", "order", fmt.Sprint(bulk[2].ID), "order.updated",
			fmt.Sprintf(`{"id":%d,"fields":{"note":null,"status":"paid"},"added":{"total":5},"old":{"note":"n","status":"placed","total":400}}`, bulk[2].ID)})

		// Update many: one event per row that matched, and no other.
		got = run(func(tx *entest.Tx) error {
			n, err := tx.Order.Update().Where(order.Status("placed"), order.TotalGTE(200)).SetStatus("cancelled").Save(ctx)
			if n != 2 {
				return fmt.Errorf("updated %d rows, want 2", n)
			}
			return err
		})
		updated := func(id int) outboxRow {
			return outboxRow{"orders", "order", fmt.Sprint(id), "order.updated", fmt.Sprintf(`{"id":%d,"fields":{"status":"cancelled"}}`, id)}
		}
		wantOutbox(t, got, updated(bulk[0].ID), updated(bulk[1].ID))

		// An update matching no row writes nothing.
		got = run(func(tx *entest.Tx) error {
			return tx.Order.Update().Where(order.Status("nonexistent")).SetStatus("x").Exec(ctx)
		})
		wantOutbox(t, got)

		deleted := func(id int) outboxRow {
			return outboxRow{"orders", "order", fmt.Sprint(id), "order.deleted", fmt.Sprintf(`{"id":%d}`, id)}
		}
		got = run(func(tx *entest.Tx) error { return tx.Order.DeleteOne(o1).Exec(ctx) })
		wantOutbox(t, got, deleted(o1.ID))

		got = run(func(tx *entest.Tx) error {
			n, err := tx.Order.Delete().Where(order.Status("cancelled")).Exec(ctx)
			if n != 2 {
				return fmt.Errorf("deleted %d rows, want 2", n)
			}
			return err
		})
		wantOutbox(t, got, deleted(bulk[0].ID), deleted(bulk[1].ID))

		if n := b.count(t, "orders"); n != 1 {
			t.Errorf("%d orders left, want 1", n)
		}
	})
}

func TestOutsideTransactionIsRefusedBeforeSQL(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng)
		ctx := context.Background()
		seed, err := b.client.Plain.Create().SetTotal(1).Save(ctx) // no mixin: allowed
		if err != nil {
			t.Fatal(err)
		}
		if err := entoutbox.WithTx(ctx, b.client, func(tx *entest.Tx) error {
			return tx.Order.Create().SetTotal(7).Exec(ctx)
		}); err != nil {
			t.Fatal(err)
		}
		var id int
		if err := b.db.SQL.QueryRow(`SELECT id FROM orders`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		b.statements.Store(0)
		c := b.client
		for name, op := range map[string]func() error{
			"create": func() error { return c.Order.Create().SetTotal(1).Exec(ctx) },
			"create bulk": func() error {
				return c.Order.CreateBulk(c.Order.Create().SetTotal(1), c.Order.Create().SetTotal(2)).Exec(ctx)
			},
			"update one": func() error { return c.Order.UpdateOneID(id).SetTotal(2).Exec(ctx) },
			"update":     func() error { return c.Order.Update().SetTotal(2).Exec(ctx) },
			"delete one": func() error { return c.Order.DeleteOneID(id).Exec(ctx) },
			"delete":     func() error { _, err := c.Order.Delete().Exec(ctx); return err },
		} {
			err := op()
			if !errors.Is(err, entoutbox.ErrNoTransaction) {
				t.Errorf("%s: err = %v, want ErrNoTransaction", name, err)
			}
		}
		if n := b.statements.Load(); n != 0 {
			t.Errorf("%d statements ran, want none", n)
		}
		err = c.Order.Create().SetTotal(1).Exec(ctx)
		want := "entoutbox: create Order: entoutbox: txoutbox: not in a transaction (use client.Tx or entoutbox.WithTx)"
		if err == nil || err.Error() != want {
			t.Errorf("err = %v, want %q", err, want)
		}
		var total int64
		if err := b.db.SQL.QueryRow(`SELECT total FROM orders`).Scan(&total); err != nil || total != 7 {
			t.Errorf("order total %d (%v), want 7 untouched", total, err)
		}
		if n := b.count(t, "orders"); n != 1 {
			t.Errorf("%d orders, want 1", n)
		}
		if n := len(b.outbox(t)); n != 1 {
			t.Errorf("%d outbox rows, want 1", n)
		}
		_ = seed
	})
}

func TestEntitiesWithoutMixinAreUntouched(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng)
		ctx := context.Background()
		c := b.client
		p, err := c.Plain.Create().SetTotal(1).Save(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Plain.CreateBulk(c.Plain.Create().SetTotal(2), c.Plain.Create().SetTotal(3)).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Plain.UpdateOne(p).SetStatus("paid").Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := entoutbox.WithTx(ctx, c, func(tx *entest.Tx) error {
			if err := tx.Plain.Update().Where(plain.TotalGT(1)).SetStatus("x").Exec(ctx); err != nil {
				return err
			}
			_, err := tx.Plain.Delete().Where(plain.TotalEQ(3)).Exec(ctx)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if err := c.Plain.DeleteOne(p).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if n := b.count(t, "plains"); n != 1 {
			t.Errorf("%d plains, want 1", n)
		}
		wantOutbox(t, b.outbox(t))
	})
}

func TestEmit(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng)
		ctx := context.Background()
		ev, err := txoutbox.NewEvent("orders", "order", "42", "order.shipped", map[string]int{"parcels": 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := entoutbox.Emit(ctx, b.client, ev); !errors.Is(err, entoutbox.ErrNoTransaction) {
			t.Errorf("Emit on the client: err = %v, want ErrNoTransaction", err)
		}
		err = entoutbox.WithTx(ctx, b.client, func(tx *entest.Tx) error {
			bad := ev
			bad.Type = ""
			if err := entoutbox.Emit(ctx, tx, bad); !errors.Is(err, txoutbox.ErrInvalidEvent) {
				t.Errorf("Emit of an invalid event: err = %v, want ErrInvalidEvent", err)
			}
			return entoutbox.Emit(ctx, tx, ev)
		})
		if err != nil {
			t.Fatal(err)
		}
		wantOutbox(t, b.outbox(t), outboxRow{"orders", "order", "42", "order.shipped", `{"parcels":2}`})
	})
}

func TestConcurrentChangeFailsUpdate(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng)
		ctx := context.Background()
		var ids []int
		err := entoutbox.WithTx(ctx, b.client, func(tx *entest.Tx) error {
			orders, err := tx.Order.CreateBulk(tx.Order.Create().SetTotal(1), tx.Order.Create().SetTotal(2)).Save(ctx)
			for _, o := range orders {
				ids = append(ids, o.ID)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		before := len(b.outbox(t))
		// Another transaction deletes a matched row after the IDs were read and
		// before the update runs: the update changes one row, not two.
		between := schema.BeforeStatement(ctx, func() { b.exec(t, fmt.Sprintf(`DELETE FROM orders WHERE id = %d`, ids[0])) })
		err = entoutbox.WithTx(ctx, b.client, func(tx *entest.Tx) error {
			return tx.Order.Update().SetStatus("paid").Exec(between)
		})
		if !errors.Is(err, entoutbox.ErrConcurrentChange) {
			t.Fatalf("err = %v, want ErrConcurrentChange", err)
		}
		wantErrContains(t, err, "entoutbox: update Order: entoutbox: rows changed concurrently; roll back and retry: 2 rows matched when their IDs were read, 1 when changed")
		if got := len(b.outbox(t)); got != before {
			t.Errorf("%d new outbox rows, want 0", got-before)
		}
		var status string
		if err := b.db.SQL.QueryRow(b.db.Q(`SELECT status FROM orders WHERE id = $1`), ids[1]).Scan(&status); err != nil || status != "placed" {
			t.Errorf("order %d status %q (%v), want placed: the update was rolled back", ids[1], status, err)
		}
	})
}

func TestUpdateOneOfMissingRowKeepsNotFound(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng)
		ctx := context.Background()
		err := entoutbox.WithTx(ctx, b.client, func(tx *entest.Tx) error {
			return tx.Order.UpdateOneID(424242).SetStatus("paid").Exec(ctx)
		})
		if !entest.IsNotFound(err) {
			t.Fatalf("err = %v, want ent's not-found error", err)
		}
		wantOutbox(t, b.outbox(t))
	})
}

// CreateBulk runs its hooks nested, the first builder's outermost; the
// events must still be written in builder order, so events a Mixin emits
// for a shared aggregate reach consumers in the order of the creates.
func TestCreateBulkWritesEventsInBuilderOrder(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng)
		ctx := context.Background()
		var orders []*entest.Order
		err := entoutbox.WithTx(ctx, b.client, func(tx *entest.Tx) (err error) {
			builders := make([]*entest.OrderCreate, 5)
			for i := range builders {
				builders[i] = tx.Order.Create().SetTotal(int64(i + 1))
			}
			orders, err = tx.Order.CreateBulk(builders...).Save(ctx)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		rows := b.outbox(t) // in outbox id order
		if len(rows) != len(orders) {
			t.Fatalf("%d outbox rows for %d creates", len(rows), len(orders))
		}
		for i, o := range orders {
			if rows[i].AggregateID != fmt.Sprint(o.ID) {
				t.Fatalf("outbox row %d is for order %s, want order %d (builder %d): events out of builder order", i, rows[i].AggregateID, o.ID, i)
			}
		}
	})
}

// An emitted event keeps its NotBefore: the row is written scheduled, in
// the mutation's transaction.
func TestEmitWithNotBefore(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng)
		ctx := context.Background()
		ev, err := txoutbox.NewEvent("orders", "order", "42", "order.reminder", map[string]int{"n": 1})
		if err != nil {
			t.Fatal(err)
		}
		ev.NotBefore = time.Now().Add(24 * time.Hour)
		if err := entoutbox.WithTx(ctx, b.client, func(tx *entest.Tx) error { return entoutbox.Emit(ctx, tx, ev) }); err != nil {
			t.Fatal(err)
		}
		var scheduled int
		query := `SELECT count(*) FROM outbox WHERE not_before > now() + interval '23 hours' AND retry_at = not_before`
		if eng == testkit.MySQL {
			query = `SELECT count(*) FROM outbox WHERE not_before > UTC_TIMESTAMP(6) + INTERVAL 23 HOUR AND retry_at = not_before`
		}
		if err := b.db.SQL.QueryRow(query).Scan(&scheduled); err != nil || scheduled != 1 {
			t.Fatalf("scheduled rows = %d, %v; want 1", scheduled, err)
		}
	})
}
