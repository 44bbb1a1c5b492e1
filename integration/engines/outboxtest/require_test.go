package outboxtest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the MySQL engine's driver
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
	"github.com/txoutbox/txoutbox/outboxtest"
)

// fakeTB records failures instead of stopping the test, so the tests can
// assert what an assertion reports.
type fakeTB struct{ failures []string }

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failures = append(f.failures, fmt.Sprintf(format, args...))
}

// failed returns the one failure, and fails t unless there was exactly one
// containing each of want.
func (f *fakeTB) failed(t *testing.T, want ...string) string {
	t.Helper()
	if len(f.failures) != 1 {
		t.Fatalf("want one failure, got %d: %q", len(f.failures), f.failures)
	}
	for _, w := range want {
		if !strings.Contains(f.failures[0], w) {
			t.Errorf("the failure does not say %q:\n%s", w, f.failures[0])
		}
	}
	return f.failures[0]
}

func (f *fakeTB) passed(t *testing.T) {
	t.Helper()
	if len(f.failures) > 0 {
		t.Fatalf("want no failure, got %q", f.failures)
	}
}

type orderPlaced struct {
	Total int64  `json:"total"`
	SKU   string `json:"sku"`
}

func event(t *testing.T, aggregateID, typ string, payload any) txoutbox.Event {
	t.Helper()
	ev, err := txoutbox.NewEvent("orders", "order", aggregateID, typ, payload)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// writeInTx writes events into table on a transaction it returns
// uncommitted, rolled back when the test ends unless committed before.
func writeInTx(t *testing.T, db *sql.DB, table txoutbox.Table, events ...txoutbox.Event) *sql.Tx {
	t.Helper()
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	if err := w.Write(context.Background(), tx, events...); err != nil {
		t.Fatal(err)
	}
	return tx
}

// writeInTxOn is writeInTx on the test database's table and dialect.
func writeInTxOn(t *testing.T, db *testkit.DB, events ...txoutbox.Event) *sql.Tx {
	t.Helper()
	tx, err := db.SQL.Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	if err := db.Writer(t).Write(context.Background(), tx, events...); err != nil {
		t.Fatal(err)
	}
	return tx
}

// write commits events in one transaction.
func write(t *testing.T, db *sql.DB, events ...txoutbox.Event) {
	t.Helper()
	if err := writeInTx(t, db, txoutbox.Table{}, events...).Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestRequireEventSeesTheTransactionsOwnEventsAndThePoolWhatCommitted(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		ctx := context.Background()
		db := testkit.NewOutboxOn(t, e)
		written := event(t, "42", "order.placed", orderPlaced{Total: 1250, SKU: "tea"})
		written.Headers = map[string]string{"tenant": "eu"}
		tx := writeInTxOn(t, db, written)

		var ftb fakeTB
		got := outboxtest.RequireEvent(ctx, &ftb, tx, outboxtest.Want{
			Topic: "orders", AggregateType: "order", AggregateID: "42", Type: "order.placed",
			Payload: outboxtest.JSON(`{ "sku": "tea", "total": 1250 }`), Headers: map[string]string{"tenant": "eu"},
			State: outboxtest.StatePending,
		})
		ftb.passed(t)
		if got.ID != written.ID || got.Seq == 0 || got.State != outboxtest.StatePending || got.ContentType != txoutbox.ContentTypeJSON {
			t.Fatalf("got %+v, want event %s pending", got, written.ID)
		}
		if p := outboxtest.Payload[orderPlaced](&ftb, got); p != (orderPlaced{Total: 1250, SKU: "tea"}) {
			t.Fatalf("decoded %+v", p)
		}
		outboxtest.RequireEvent(ctx, &ftb, tx, outboxtest.Want{Payload: orderPlaced{Total: 1250, SKU: "tea"}})
		ftb.passed(t)

		// Not committed: the pool does not see it.
		outboxtest.RequireNoEvent(ctx, &ftb, db.SQL, outboxtest.Want{})
		ftb.passed(t)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		outboxtest.RequireEvent(ctx, &ftb, db.SQL, outboxtest.Want{Type: "order.placed"})
		ftb.passed(t)
	})
}

func TestRequireEventReadsThroughPgx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.NewOutbox(t)
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := w.Write(ctx, txoutbox.Pgx(tx), event(t, "7", "order.placed", orderPlaced{Total: 5})); err != nil {
		t.Fatal(err)
	}
	var ftb fakeTB
	e := outboxtest.RequireEvent(ctx, &ftb, tx, outboxtest.Want{AggregateID: "7"})
	ftb.passed(t)
	if outboxtest.Payload[orderPlaced](&ftb, e).Total != 5 {
		t.Fatalf("payload %s", e.Payload)
	}
	outboxtest.RequireNoEvent(ctx, &ftb, pool, outboxtest.Want{})
	ftb.passed(t)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	outboxtest.RequireEvent(ctx, &ftb, pool, outboxtest.Want{AggregateID: "7"})
	ftb.passed(t)
}

func TestRequireEventShowsWhatTheOutboxHoldsInstead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.NewOutbox(t)
	write(t, db.SQL, event(t, "41", "order.placed", orderPlaced{Total: 1250}), event(t, "42", "order.paid", orderPlaced{Total: 1250}))

	var ftb fakeTB
	got := outboxtest.RequireEvent(ctx, &ftb, db.SQL, outboxtest.Want{Type: "order.placed", AggregateID: "42"})
	msg := ftb.failed(t,
		`no event matches {AggregateID: "42", Type: "order.placed"}`,
		"the outbox holds 2 events",
		`orders order.placed order/41 pending payload={"total":1250,"sku":""}  ← aggregate id is "41"`,
		`orders order.paid order/42 pending`, `← type is "order.paid"`)
	if got.Seq != 0 {
		t.Fatalf("a failed RequireEvent returned %v", got)
	}
	t.Logf("the failure:\n%s", msg)

	ftb = fakeTB{}
	outboxtest.RequireEvent(ctx, &ftb, db.SQL, outboxtest.Want{Topic: "orders"})
	ftb.failed(t, `2 events match {Topic: "orders"}, want exactly one`)

	ftb = fakeTB{}
	outboxtest.RequireEvent(ctx, &ftb, db.SQL, outboxtest.Want{Type: "order.paid", Payload: map[string]any{"total": 999}})
	ftb.failed(t, `Payload: {"total":999}`, "← payload differs", `← type is "order.placed", payload differs`)

	ftb = fakeTB{}
	outboxtest.RequireEvent(ctx, &ftb, db.SQL, outboxtest.Want{Type: "order.paid", Payload: outboxtest.JSON(`{"total":1250.0,"sku":""}`)})
	ftb.failed(t, "← payload differs") // numbers compare by their text

	ftb = fakeTB{}
	outboxtest.RequireEvent(ctx, &ftb, db.SQL, outboxtest.Want{Type: "order.paid", Headers: map[string]string{"tenant": "eu"}, State: outboxtest.StateDead})
	ftb.failed(t, `← state is "pending", no header "tenant"`)

	ftb = fakeTB{}
	outboxtest.RequireEvent(ctx, &ftb, testkit.NewOutbox(t).SQL, outboxtest.Want{Type: "order.paid"})
	ftb.failed(t, "the outbox is empty")
}

func TestRequireNoEventListsWhatMatched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.NewOutbox(t)
	write(t, db.SQL, event(t, "1", "order.placed", nil), event(t, "2", "order.cancelled", nil))
	var ftb fakeTB
	outboxtest.RequireNoEvent(ctx, &ftb, db.SQL, outboxtest.Want{Type: "order.shipped"})
	ftb.passed(t)
	outboxtest.RequireNoEvent(ctx, &ftb, db.SQL, outboxtest.Want{Type: "order.cancelled"})
	msg := ftb.failed(t, `want no event matching {Type: "order.cancelled"}, found 1`, "order.cancelled order/2")
	if strings.Contains(msg, "order.placed") {
		t.Fatalf("the failure lists an event that does not match:\n%s", msg)
	}
}

func TestRequireEventsChecksTheOrderOfTheEventsWanted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.NewOutbox(t)
	write(t, db.SQL,
		event(t, "1", "order.placed", orderPlaced{Total: 1}),
		event(t, "9", "customer.created", nil), // matches no Want below: left out
		event(t, "1", "order.paid", orderPlaced{Total: 1}),
	)
	placed := outboxtest.Want{AggregateID: "1", Type: "order.placed"}
	paid := outboxtest.Want{AggregateID: "1", Type: "order.paid"}

	var ftb fakeTB
	got := outboxtest.RequireEvents(ctx, &ftb, db.SQL, placed, paid)
	ftb.passed(t)
	if len(got) != 2 || got[0].Type != "order.placed" || got[1].Type != "order.paid" || got[0].Seq >= got[1].Seq {
		t.Fatalf("got %v", got)
	}

	outboxtest.RequireEvents(ctx, &ftb, db.SQL, paid, placed)
	msg := ftb.failed(t, "want 2 events in this order:", `1. {AggregateID: "1", Type: "order.paid"}`,
		"the 2 events matching any of them, in the order written:",
		`order.placed order/1 pending payload={"total":1,"sku":""}  ← not 1. (type is "order.placed")`,
		`← not 2. (type is "order.paid")`)
	if strings.Contains(msg, "customer.created") {
		t.Fatalf("the failure lists an event no Want concerns:\n%s", msg)
	}

	ftb = fakeTB{}
	outboxtest.RequireEvents(ctx, &ftb, db.SQL, placed, paid, outboxtest.Want{Type: "order.shipped"})
	ftb.failed(t, "want 3 events", "(1 missing)")

	ftb = fakeTB{}
	outboxtest.RequireEvents(ctx, &ftb, db.SQL, outboxtest.Want{Topic: "orders", AggregateID: "1"})
	ftb.failed(t, "want 1 events", "← an extra event")

	ftb = fakeTB{}
	outboxtest.RequireEvents(ctx, &ftb, db.SQL, outboxtest.Want{Type: "order.shipped"})
	ftb.failed(t, "none matches any of them; the outbox holds 3 events")

	ftb = fakeTB{}
	outboxtest.RequireEvents(ctx, &ftb, db.SQL)
	ftb.failed(t, "RequireEvents without a Want")
}

func TestPayloadShowsWhatItCouldNotDecode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.NewOutbox(t)
	write(t, db.SQL, event(t, "1", "order.placed", map[string]any{"total": "a lot"}))
	var ftb fakeTB
	e := outboxtest.RequireEvent(ctx, &ftb, db.SQL, outboxtest.Want{})
	ftb.passed(t)
	got := outboxtest.Payload[orderPlaced](&ftb, e)
	ftb.failed(t, "decode the payload of #", `payload={"total":"a lot"}`, "outboxtest_test.orderPlaced")
	if got != (orderPlaced{}) {
		t.Fatalf("a failed Payload returned %+v", got)
	}
}

func TestInTableReadsAnotherTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.NewDB(t)
	table := txoutbox.Table{Schema: db.Schema, Name: "billing_events"}
	m, err := migrations.New(db.SQL, migrations.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	tx := writeInTx(t, db.SQL, table, event(t, "1", "invoice.issued", nil))
	var ftb fakeTB
	outboxtest.RequireEvent(ctx, &ftb, outboxtest.InTable(tx, table), outboxtest.Want{Type: "invoice.issued"})
	ftb.passed(t)

	// The default table does not exist in this schema.
	outboxtest.RequireEvent(ctx, &ftb, tx, outboxtest.Want{})
	ftb.failed(t, `outboxtest: read "outbox"`)

	ftb = fakeTB{}
	outboxtest.RequireEvent(ctx, &ftb, outboxtest.InTable(db.SQL, txoutbox.Table{Name: "x; drop table y"}), outboxtest.Want{})
	ftb.failed(t, "outboxtest:", "x; drop table y")
}

func TestAnythingElseIsRefusedWithWhatToPass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type gormLike struct{ Statement any }
	for _, q := range []any{nil, gormLike{}, "postgres://"} {
		_, err := outboxtest.ReadEvents(ctx, q)
		if !errors.Is(err, outboxtest.ErrNotQuerier) || !strings.Contains(err.Error(), "pass a *sql.Tx") && q != nil {
			t.Errorf("ReadEvents(%T): %v", q, err)
		}
		var ftb fakeTB
		outboxtest.RequireNoEvent(ctx, &ftb, q, outboxtest.Want{})
		ftb.failed(t, "outboxtest: not a Querier")
	}
}

func TestWantStringShowsItsSetFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		w    outboxtest.Want
		want string
	}{
		{outboxtest.Want{}, "{any event}"},
		{outboxtest.Want{Topic: "orders", State: outboxtest.StateDead}, `{Topic: "orders", State: "dead"}`},
		{outboxtest.Want{Payload: []byte(`{"a":1}`), Headers: map[string]string{"b": "2", "a": "1"}}, `{Payload: {"a":1}, Headers: {a="1" b="2"}}`},
		{outboxtest.Want{Payload: json.RawMessage(`not json`)}, `{Payload: "not json"}`},
		{outboxtest.Want{Payload: func() {}}, `{Payload: the wanted payload does not marshal`},
	} {
		if got := tc.w.String(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("got %s, want %s", got, tc.want)
		}
	}
}

// A nil handle of a Querier's type fails the assertion, saying so, rather
// than panicking in its query method.
func TestANilHandleIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		q    outboxtest.Querier
		want string
	}{
		{(*sql.DB)(nil), "a nil *sql.DB"},
		{(*sql.Tx)(nil), "a nil *sql.Tx"},
		{(*pgxpool.Pool)(nil), "a nil *pgxpool.Pool"},
		{outboxtest.InTable((*sql.DB)(nil), txoutbox.Table{Name: "events"}), "a nil *sql.DB"},
	} {
		if _, err := outboxtest.ReadEvents(ctx, tc.q); !errors.Is(err, outboxtest.ErrNotQuerier) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadEvents(%s): %v, want ErrNotQuerier saying %q", tc.want, err, tc.want)
		}
		var ftb fakeTB
		outboxtest.RequireEvent(ctx, &ftb, tc.q, outboxtest.Want{Type: "order.placed"})
		ftb.failed(t, "outboxtest: not a Querier", tc.want)
	}
}

// notPgx has a Query method of another shape than pgx's: it is not taken
// for a pgx handle, which the package finds by the method's signature.
type notPgx struct{}

func (notPgx) Query(ctx context.Context, sql string) (*sql.Rows, error) { return nil, nil }

func TestAQueryOfAnotherShapeIsRefused(t *testing.T) {
	t.Parallel()
	_, err := outboxtest.ReadEvents(context.Background(), notPgx{})
	if !errors.Is(err, outboxtest.ErrNotQuerier) || !strings.Contains(err.Error(), "outboxtest_test.notPgx has neither") {
		t.Fatalf("ReadEvents(notPgx{}): %v, want ErrNotQuerier naming the type", err)
	}
}

// ReadEvents shows a delayed event's NotBefore, and a failure lists it.
func TestReadEventsShowsNotBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.NewOutbox(t)
	delayed := event(t, "42", "order.reminder", map[string]int{"n": 1})
	delayed.NotBefore = time.Now().Add(time.Hour).Truncate(time.Microsecond)
	write(t, db.SQL, event(t, "42", "order.placed", map[string]int{"n": 0}), delayed)
	e := outboxtest.RequireEvent(ctx, t, db.SQL, outboxtest.Want{Type: "order.reminder"})
	if !e.NotBefore.Equal(delayed.NotBefore) {
		t.Fatalf("NotBefore %v, want %v", e.NotBefore, delayed.NotBefore)
	}
	if p := outboxtest.RequireEvent(ctx, t, db.SQL, outboxtest.Want{Type: "order.placed"}); !p.NotBefore.IsZero() {
		t.Fatalf("an event due at once has NotBefore %v, want zero", p.NotBefore)
	}
	var ftb fakeTB
	outboxtest.RequireNoEvent(ctx, &ftb, db.SQL, outboxtest.Want{Type: "order.reminder"})
	ftb.failed(t, "not-before="+delayed.NotBefore.UTC().Format(time.RFC3339Nano))
}
