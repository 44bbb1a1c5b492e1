package outboxadmin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin"
)

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	for _, cfg := range []outboxadmin.Config{
		{Table: txoutbox.Table{Name: "x; drop table y"}},
		{StaleAfter: -time.Second},
		{ReplayBatch: -1},
	} {
		if _, err := outboxadmin.New(db.SQL, cfg); !errors.Is(err, outboxadmin.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := outboxadmin.New(nil, outboxadmin.Config{}); !errors.Is(err, outboxadmin.ErrInvalidConfig) {
		t.Errorf("New(nil) = %v, want ErrInvalidConfig", err)
	}
}

func TestSelectionsMustBeExplicit(t *testing.T) {
	t.Parallel()
	_, adm, _ := setup(t, outboxadmin.Config{})
	ctx := context.Background()
	if _, err := adm.Retry(ctx, outboxadmin.Filter{}, false); !errors.Is(err, outboxadmin.ErrNoSelection) {
		t.Errorf("Retry(zero Filter) = %v, want ErrNoSelection", err)
	}
	if _, err := adm.Drop(ctx, outboxadmin.Filter{}, false); !errors.Is(err, outboxadmin.ErrNoSelection) {
		t.Errorf("Drop(zero Filter) = %v, want ErrNoSelection", err)
	}
	if _, err := adm.Replay(ctx, outboxadmin.ReplayFilter{Topic: "orders"}, false); !errors.Is(err, outboxadmin.ErrNoSince) {
		t.Errorf("Replay without Since = %v, want ErrNoSince", err)
	}
	if _, err := adm.ListDead(ctx, outboxadmin.Filter{}, 0, outboxadmin.DeadPageMax+1); err == nil {
		t.Errorf("ListDead over DeadPageMax succeeded")
	}
	if _, err := adm.Event(ctx, 42); !errors.Is(err, outboxadmin.ErrNotFound) {
		t.Errorf("Event(42) = %v, want ErrNotFound", err)
	}
}

// Aggregate ids are arbitrary text: the retry's lock of later events must
// treat one with commas, quotes and braces as one id.
func TestRetryWithAwkwardAggregateIDs(t *testing.T) {
	t.Parallel()
	db, adm, w := setup(t, outboxadmin.Config{})
	ctx := context.Background()
	awkward := `a,"b"} \c {d`
	var events []txoutbox.Event
	for _, agg := range []string{awkward, awkward, "plain"} {
		e, err := txoutbox.NewEvent("orders", "order", agg, "order.placed", nil)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	testkit.Commit(t, ctx, db.SQL, w, events...)
	if _, err := db.SQL.Exec(`UPDATE outbox SET state = 'dead' WHERE id IN (1, 3)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL.Exec(`UPDATE outbox SET state = 'claimed', lease_owner = 'r' WHERE id = 2`); err != nil {
		t.Fatal(err)
	}
	retried, err := adm.Retry(ctx, outboxadmin.Filter{All: true}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(retried) != 2 || retried[0].AggregateID != awkward || len(retried[0].Overtaken) != 1 || retried[0].Overtaken[0] != 2 ||
		retried[1].AggregateID != "plain" || len(retried[1].Overtaken) != 0 {
		t.Fatalf("retried = %+v", retried)
	}
}

// setup gives a test an outbox of its own, an Admin on it with cfg (its
// Table set) and a Writer for it.
func setup(t *testing.T, cfg outboxadmin.Config) (*testkit.DB, *outboxadmin.Admin, *txoutbox.Writer) {
	t.Helper()
	db := testkit.NewOutbox(t)
	cfg.Table = db.Table()
	adm, err := outboxadmin.New(db.SQL, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return db, adm, testkit.NewWriter(t, db.Table())
}

// A dead row whose headers are not a JSON object of strings (the relay
// dead-letters such rows at once) is listed, read, retried and dropped,
// with its headers as stored.
func TestMalformedHeadersAreReadable(t *testing.T) {
	t.Parallel()
	db, adm, _ := setup(t, outboxadmin.Config{})
	ctx := context.Background()
	ids := testkit.SeedHostile(t, db)
	bad := ids["headers-nested"]
	rows, err := adm.ListDead(ctx, outboxadmin.Filter{}, 0, 100)
	if err != nil || len(rows) != len(ids) {
		t.Fatalf("ListDead = %d rows, %v; want %d", len(rows), err, len(ids))
	}
	r, err := adm.Event(ctx, bad)
	if err != nil || r.Headers != nil || !strings.Contains(string(r.RawHeaders), `"nested"`) || !strings.Contains(r.HeadersError, "not a JSON object of strings") {
		t.Fatalf("Event = %+v, %v", r, err)
	}
	if r, err := adm.Event(ctx, ids["headers-escapes"]); err != nil || r.RawHeaders != nil || r.Headers["bidi"] != "abc\u202etxt" {
		t.Fatalf("Event of well-formed headers = %+v, %v", r.Headers, err)
	}
	if got, err := adm.Retry(ctx, outboxadmin.Filter{IDs: []int64{bad}}, false); err != nil || len(got) != 1 || got[0].RawHeaders == nil {
		t.Fatalf("Retry = %+v, %v", got, err)
	}
	if _, err := db.SQL.Exec(`UPDATE outbox SET state = 'dead' WHERE id = $1`, bad); err != nil {
		t.Fatal(err)
	}
	if got, err := adm.Drop(ctx, outboxadmin.Filter{All: true}, false); err != nil || len(got) != len(ids) {
		t.Fatalf("Drop(All) = %d rows, %v; want %d", len(got), err, len(ids))
	}
}
