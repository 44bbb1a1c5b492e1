package outboxsql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// floorOf reads the claim floor and its generation.
func (c costDB) floorOf(t *testing.T) (floor, gen int64) {
	t.Helper()
	if err := c.db.QueryRow(c.names.Render(`SELECT floor, gen FROM {{floor}}`)).Scan(&floor, &gen); err != nil {
		t.Fatal(err)
	}
	return floor, gen
}

// startFloor runs ClaimFloorStart.
func (c costDB) startFloor(t *testing.T) outboxsql.ClaimFloorProof {
	t.Helper()
	var p outboxsql.ClaimFloorProof
	if err := c.db.QueryRow(c.names.Render(outboxsql.ClaimFloorStart)).Scan(&p.MaxID, &p.XMax, &p.VXIDs, &p.Gen, &p.Floor); err != nil {
		t.Fatal(err)
	}
	return p
}

func (c costDB) passed(t *testing.T, p outboxsql.ClaimFloorProof) bool {
	t.Helper()
	var ok bool
	if err := c.db.QueryRow(outboxsql.ClaimFloorPassed, p.PassedArgs()...).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// waitPassed waits until proof p holds.
func (c costDB) waitPassed(t *testing.T, p outboxsql.ClaimFloorProof) {
	t.Helper()
	if !testkit.Eventually(time.Minute, func() bool { return c.passed(t, p) }) {
		t.Fatalf("the claim floor's proof %+v did not hold in a minute", p)
	}
}

// raise runs ClaimFloorRaise for proof p and returns the floor it set.
func (c costDB) raise(p outboxsql.ClaimFloorProof) (int64, error) {
	var floor int64
	err := c.db.QueryRow(c.names.Render(outboxsql.ClaimFloorRaise), p.RaiseArgs()...).Scan(&floor)
	return floor, err
}

// raiseFloor raises the claim floor as a relay's rounds do
// (ClaimFloorStart, ClaimFloorPassed, ClaimFloorRaise), waiting for the
// transactions running at the start to end, and returns it.
func (c costDB) raiseFloor(t *testing.T) int64 {
	t.Helper()
	p := c.startFloor(t)
	c.waitPassed(t, p)
	floor, err := c.raise(p)
	if err != nil {
		t.Fatalf("raise the claim floor: %v", err)
	}
	return floor
}

// A transaction that took a row id before the proof began, but has no
// transaction id yet (nextval assigns none, and its insert comes later),
// is not in the snapshot's list: the proof waits for it by its virtual
// transaction id, so its row, committed late with a low id, is not left
// below the floor.
func TestClaimFloorWaitsForATransactionWithNoIDYet(t *testing.T) {
	ctx := context.Background()
	c := newCostDB(t)
	c.insert(t, 100, `'drained-' || g`, "published", "0", "now()", "now()", "now()")
	var late int64 // the id the late transaction took before the proof
	if err := c.db.QueryRow(c.names.Render(`SELECT nextval(pg_get_serial_sequence('{{table}}', 'id'))`)).Scan(&late); err != nil {
		t.Fatal(err)
	}
	c.insert(t, 10, `'fresh-' || g`, "pending", "0", "now()", "now()", "NULL")

	conn := c.openTx(t)
	var xid *string
	if err := conn.QueryRowContext(ctx, `SELECT pg_current_xact_id_if_assigned()::text`).Scan(&xid); err != nil || xid != nil {
		t.Fatalf("the late transaction has transaction id %v (%v), want none yet", xid, err)
	}
	p := c.startFloor(t)
	// Its insert comes after the proof began: its transaction id is above
	// the proof's X, so the snapshot test alone would pass.
	if _, err := conn.ExecContext(ctx, c.names.Render(`INSERT INTO {{table}} (id, event_id, topic, aggregate_id, event_type, payload)
        OVERRIDING SYSTEM VALUE VALUES ($1, gen_random_uuid(), 'orders', 'late', 'e', '{}')`), late); err != nil {
		t.Fatal(err)
	}
	// Once the proof waits for the late transaction alone (it holds
	// without it), it does not hold.
	lateVXID := vxid(t, conn)
	others := p
	if err := c.db.QueryRow(`SELECT array_remove($1::text[], $2)::text`, p.VXIDs, lateVXID).Scan(&others.VXIDs); err != nil {
		t.Fatal(err)
	}
	c.waitPassed(t, others)
	if c.passed(t, p) {
		t.Fatalf("the proof %+v holds while a transaction running when it began is open", p)
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	c.waitPassed(t, p) // after the late commit
	floor, err := c.raise(p)
	if err != nil {
		t.Fatal(err)
	}
	if floor != late {
		t.Fatalf("claim floor %d, want %d: the late row's id", floor, late)
	}
}

// A retry or replay returns rows below the floor to pending: it lowers the
// floor to them in its transaction and bumps the generation, so a proof
// begun before it raises nothing.
func TestOperatorsLowerTheClaimFloor(t *testing.T) {
	c := newCostDB(t)
	c.insert(t, 100, `'drained-' || g`, "published", "0", "now()", "now()", "now()")
	c.insert(t, 10, `'fresh-' || g`, "pending", "0", "now()", "now()", "NULL")
	if floor := c.raiseFloor(t); floor != 101 {
		t.Fatalf("claim floor %d, want 101", floor)
	}
	stale := c.startFloor(t)
	c.exec(t, outboxsql.OpsReplay, "{7,9}")
	c.exec(t, outboxsql.OpsLowerFloor, "{7,9}")
	if floor, gen := c.floorOf(t); floor != 7 || gen != stale.Gen+1 {
		t.Fatalf("claim floor %d (generation %d) after a replay of rows 7 and 9, want 7 (%d)", floor, gen, stale.Gen+1)
	}
	c.waitPassed(t, stale)
	if floor, err := c.raise(stale); err == nil {
		t.Fatalf("a proof begun before the replay raised the floor to %d", floor)
	}
	if floor := c.raiseFloor(t); floor != 7 {
		t.Fatalf("claim floor %d after a new proof, want 7: the replayed row", floor)
	}
	c.exec(t, outboxsql.OpsLowerFloor, "{}") // a retry of nothing keeps it
	if floor, _ := c.floorOf(t); floor != 7 {
		t.Fatalf("claim floor %d after lowering to no row, want 7", floor)
	}
}

// A proof started when no row was inserted at or above the floor cannot
// raise it, so ClaimFloorStart leaves out its read of pg_locks (a cost
// that grows with the server's sessions, paid by every idle table of a
// group every few rounds): the proof is idle and lists no transaction,
// though one is running. A row inserted since makes it a proof again.
func TestAnIdleTablesFloorProofReadsNoLocks(t *testing.T) {
	c := newCostDB(t)
	c.insert(t, 10, `'drained-' || g`, "published", "0", "now()", "now()", "now()")
	floor := c.raiseFloor(t)
	if floor != 11 {
		t.Fatalf("floor %d after 10 published rows, want 11", floor)
	}

	conn := c.openTx(t)
	open := vxid(t, conn)

	p := c.startFloor(t)
	if !p.Idle() || p.VXIDs != "{}" || p.Floor != 11 {
		t.Fatalf("proof with nothing inserted since the floor: %+v, want idle, no transactions listed, floor 11", p)
	}
	c.insert(t, 1, `'fresh'`, "pending", "0", "now()", "now()", "NULL")
	p = c.startFloor(t)
	if p.Idle() || !strings.Contains(p.VXIDs, open) {
		t.Fatalf("proof after an insert: %+v, want one that waits for the running transaction %s", p, open)
	}
}

// openTx returns a connection of its own with a transaction begun on it,
// rolled back when the test ends.
func (c costDB) openTx(t *testing.T) *sql.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := c.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.ExecContext(ctx, `ROLLBACK`)
		conn.Close()
	})
	return conn
}

// vxid is the virtual transaction id of conn's open transaction.
func vxid(t *testing.T, conn *sql.Conn) string {
	t.Helper()
	var v string
	if err := conn.QueryRowContext(context.Background(), `SELECT virtualxid FROM pg_locks WHERE locktype = 'virtualxid' AND pid = pg_backend_pid()`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
