package relay

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// opaqueDriver is pgx's database/sql driver behind a connection that does
// not give out its *pgx.Conn, as another driver (lib/pq) does not: the
// relay claims over database/sql's transactions then, in four round trips
// instead of two, and polls instead of listening.
type opaqueDriver struct{}

func (opaqueDriver) Open(name string) (driver.Conn, error) {
	c, err := stdlib.GetDefaultDriver().Open(name)
	if err != nil {
		return nil, err
	}
	return opaqueConn{c}, nil
}

// opaqueConn passes every call on, and has no Conn method.
type opaqueConn struct{ c driver.Conn }

func (o opaqueConn) Prepare(q string) (driver.Stmt, error) { return o.c.Prepare(q) }
func (o opaqueConn) Close() error                          { return o.c.Close() }
func (o opaqueConn) Begin() (driver.Tx, error)             { return o.c.Begin() } //nolint:staticcheck // driver.Conn requires it
func (o opaqueConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return o.c.(driver.ConnBeginTx).BeginTx(ctx, opts)
}
func (o opaqueConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return o.c.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}
func (o opaqueConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return o.c.(driver.ExecerContext).ExecContext(ctx, q, args)
}
func (o opaqueConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	return o.c.(driver.QueryerContext).QueryContext(ctx, q, args)
}
func (o opaqueConn) CheckNamedValue(v *driver.NamedValue) error {
	return o.c.(driver.NamedValueChecker).CheckNamedValue(v)
}
func (o opaqueConn) ResetSession(ctx context.Context) error {
	return o.c.(driver.SessionResetter).ResetSession(ctx)
}

func init() { sql.Register("txoutbox-opaque-pgx", opaqueDriver{}) }

// The claim is the same transaction whether its first three statements go
// in one round trip (pgx) or one at a time (any other driver): the same
// rows, an undecodable one made dead in it, and a claim that commits.
func TestClaimOnEitherDriver(t *testing.T) {
	t.Parallel()
	for _, opaque := range []bool{false, true} {
		name := map[bool]string{false: "pgx", true: "other"}[opaque]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupInternal(t)
			b.write(t, 3, "k", "m")
			b.exec(t, `UPDATE outbox SET headers = '{"n": 1}' WHERE id = 3`)
			db := b.db.SQL
			if !opaque {
				// The pgx subtest runs the batch path only if the pool's
				// connections are *pgx.Conn, as runClaim asks; a wrapped
				// driver would send both subtests down the other one.
				if err := onPgxConn(context.Background(), db, func(*pgx.Conn) error { return nil }); err != nil {
					t.Fatalf("the pgx pool's connection: %v, want a *pgx.Conn (the claim's batch)", err)
				}
			} else {
				var err error
				if db, err = sql.Open("txoutbox-opaque-pgx", b.db.URL); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = db.Close() })
				if err := onPgxConn(context.Background(), db, func(*pgx.Conn) error { return nil }); err != errNotPgx {
					t.Fatalf("the opaque driver's connection: %v, want errNotPgx", err)
				}
			}
			r, err := New(db, nopPublisher{}, Config{Table: b.db.Table(), ID: "r1", Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			ready(t, r)
			rows, err := r.claimer.claim(context.Background(), 100)
			if err != nil {
				t.Fatal(err)
			}
			if got := idsOf(rows); got != "1 2 4 5 6" {
				t.Fatalf("claimed %q, want 1 2 4 5 6 (3 undecodable)", got)
			}
			for _, row := range rows {
				if row.event.AggregateID == "" || row.event.ID.String() == "00000000-0000-0000-0000-000000000000" || len(row.event.Payload) == 0 {
					t.Fatalf("row %d read as %+v", row.id, row.event)
				}
			}
			if rows[0].event.ID == rows[1].event.ID || string(rows[0].event.Payload) != "0" || string(rows[4].event.Payload) != "2" {
				t.Fatalf("rows read as one another: %+v / %+v", rows[0].event, rows[1].event)
			}
			var claimed, dead int
			if err := b.db.SQL.QueryRow(`SELECT count(*) FILTER (WHERE state <> 'dead' AND lease_expires_at > now()),
				count(*) FILTER (WHERE state = 'dead' AND id = 3) FROM outbox`).Scan(&claimed, &dead); err != nil {
				t.Fatal(err)
			}
			if claimed != 5 || dead != 1 {
				t.Fatalf("after the claim: %d rows claimed, row 3 dead: %d; want 5 and 1 (committed)", claimed, dead)
			}
		})
	}
}

// A claim that fails inside its transaction claims nothing, leaves none
// of the relay's sessions in a transaction (an aborted one included), and
// the next claim, once the fault is gone, takes the rows, on either
// driver. Two faults: the claim gate held by an operator past
// StatementTimeout, so ClaimSettings' lock wait times out in the middle of
// pgx's batch (on the server or the client: both deadlines are
// StatementTimeout); and the claim statement itself failing on the
// server, its connection kept.
func TestFailedClaimRollsBackOnEitherDriver(t *testing.T) {
	t.Parallel()
	faults := map[string]func(t *testing.T, b *internalBundle) (end func()){
		"gate held": func(t *testing.T, b *internalBundle) func() {
			names, err := outboxsql.NamesFor(b.db.Table().Schema, b.db.Table().Name)
			if err != nil {
				t.Fatal(err)
			}
			op, err := b.db.SQL.BeginTx(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = op.Rollback() })
			if _, err := op.Exec(names.Render(outboxsql.OpsClaimGate)); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := op.Rollback(); err != nil {
					t.Fatal(err)
				}
			}
		},
		"claim fails": func(t *testing.T, b *internalBundle) func() {
			b.exec(t, `ALTER TABLE outbox_relays RENAME TO outbox_relays_t`)
			b.exec(t, `CREATE FUNCTION review_gate() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$ BEGIN RAISE EXCEPTION 'relays unreadable'; END $$`)
			b.exec(t, `CREATE VIEW outbox_relays AS SELECT * FROM outbox_relays_t WHERE review_gate()`)
			return func() {
				b.exec(t, `CREATE OR REPLACE FUNCTION review_gate() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$ BEGIN RETURN true; END $$`)
			}
		},
	}
	for fault, start := range faults {
		for _, opaque := range []bool{false, true} {
			name := fault + "/" + map[bool]string{false: "pgx", true: "other"}[opaque]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := setupInternal(t)
				b.write(t, 2, "k")
				// The relay's sessions, named so they can be found.
				u, err := url.Parse(b.db.URL)
				if err != nil {
					t.Fatal(err)
				}
				app := "claim-rollback-" + b.db.Table().Schema
				q := u.Query()
				q.Set("application_name", app)
				u.RawQuery = q.Encode()
				db, err := sql.Open(map[bool]string{false: "pgx", true: "txoutbox-opaque-pgx"}[opaque], u.String())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = db.Close() })
				r, err := New(db, nopPublisher{}, Config{Table: b.db.Table(), ID: "r1", StatementTimeout: time.Second,
					Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				ready(t, r)

				end := start(t, b)
				rows, err := r.claimer.claim(context.Background(), 100)
				if err == nil {
					t.Fatalf("claim: %d rows and no error, want the fault's error", len(rows))
				}
				var leased int
				if err := b.db.SQL.QueryRow(`SELECT count(*) FROM outbox WHERE lease_owner IS NOT NULL`).Scan(&leased); err != nil {
					t.Fatal(err)
				}
				if leased != 0 {
					t.Fatalf("%d rows leased by the failed claim, want 0", leased)
				}
				// A backend whose client gave up first passes through
				// "idle in transaction (aborted)" on its way out; a session
				// left in a transaction stays there.
				var inTx int
				if !testkit.Eventually(5*time.Second, func() bool {
					if err := b.db.SQL.QueryRow(`SELECT count(*) FROM pg_stat_activity
						WHERE application_name = $1 AND state LIKE 'idle in transaction%'`, app).Scan(&inTx); err != nil {
						t.Fatal(err)
					}
					return inTx == 0
				}) {
					t.Fatalf("%d of the relay's sessions left in a transaction after the failed claim", inTx)
				}
				end()
				rows, err = r.claimer.claim(context.Background(), 100)
				if err != nil {
					t.Fatal(err)
				}
				if got := idsOf(rows); got != "1 2" {
					t.Fatalf("claimed %q once the fault was gone, want 1 2", got)
				}
			})
		}
	}
}
