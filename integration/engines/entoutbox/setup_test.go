package entoutbox_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/txoutbox/internal/entest"
	_ "github.com/txoutbox/txoutbox/internal/entest/runtime"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

var schemaCreate sync.Mutex

// bundle is one test's database and ent client.
type bundle struct {
	db     *testkit.DB
	client *entest.Client
	// statements counts the statements the client's driver ran.
	statements atomic.Int64
}

func setup(t testing.TB, eng testkit.Engine) *bundle {
	t.Helper()
	ctx := context.Background()
	b := &bundle{db: testkit.NewOutboxOn(t, eng)}
	sqldb, err := sql.Open(b.db.DriverName(), b.db.DSN())
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	sqldb.SetMaxOpenConns(16)
	drv := dialect.DebugWithContext(entsql.OpenDB(entDialect(eng), sqldb), func(context.Context, ...any) {
		b.statements.Add(1)
	})
	b.client = entest.NewClient(entest.Driver(drv))
	t.Cleanup(func() { b.client.Close() })
	// ent's Schema.Create writes to the generated package's global table
	// definitions, so parallel tests take turns.
	schemaCreate.Lock()
	err = b.client.Schema.Create(ctx)
	schemaCreate.Unlock()
	if err != nil {
		t.Fatalf("create ent schema: %v", err)
	}
	b.statements.Store(0)
	return b
}

// entDialect is ent's name of the engine's dialect.
func entDialect(eng testkit.Engine) string {
	if eng == testkit.MySQL {
		return dialect.MySQL
	}
	return dialect.Postgres
}

// outboxRow is what a test checks of an outbox row.
type outboxRow struct {
	Topic, AggregateType, AggregateID, Type, Payload string
}

func (b *bundle) outbox(t testing.TB) []outboxRow {
	t.Helper()
	rows, err := b.db.SQL.Query(`SELECT topic, aggregate_type, aggregate_id, event_type, payload FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	defer rows.Close()
	var out []outboxRow
	for rows.Next() {
		var r outboxRow
		if err := rows.Scan(&r.Topic, &r.AggregateType, &r.AggregateID, &r.Type, &r.Payload); err != nil {
			t.Fatalf("scan outbox: %v", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	return out
}

func (b *bundle) count(t testing.TB, table string) int {
	t.Helper()
	var n int
	if err := b.db.SQL.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func (b *bundle) exec(t testing.TB, query string) {
	t.Helper()
	if _, err := b.db.SQL.Exec(query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func wantOutbox(t testing.TB, got []outboxRow, want ...outboxRow) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("outbox has %d rows, want %d:\n got: %v\nwant: %v", len(got), len(want), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("outbox row %d:\n got: %+v\nwant: %+v", i, got[i], want[i])
		}
	}
}

func wantErrContains(t testing.TB, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want an error containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("err = %q, want it to contain %q", err, p)
		}
	}
}
