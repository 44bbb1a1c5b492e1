package testkit

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Work is what one run of a statement's plan did, from EXPLAIN (ANALYZE,
// BUFFERS): the shared buffers it hit and read (each page access counts,
// so a page read twice counts twice) and the rows its top node returned.
// It does not depend on timing or on what the cache holds.
type Work struct {
	Buffers int64
	Rows    int64
}

// PlanModes are the plan_cache_mode values PlanWork runs a statement
// under: a plan made for the parameters, and the generic plan a prepared
// statement switches to after five runs.
var PlanModes = []string{"force_custom_plan", "force_generic_plan"}

// PlanWork runs stmt with args as a prepared statement under plan_cache_mode
// mode inside a transaction it rolls back, after the setup statements (such
// as the claim's settings; they run in the same transaction, before mode is
// set), and returns the work its plan did. A statement that changes rows
// changes nothing: the transaction is rolled back. args are rendered as SQL
// literals (ints, strings, nil), so the statement's parameters take the
// types its text gives them. With TESTKIT_PLAN_TEXT set in the
// environment it logs the plan as text instead, to see where the work
// goes, and returns no work.
func PlanWork(t testing.TB, db *sql.DB, mode string, setup []string, stmt string, args ...any) Work {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // only rolled back
	for _, s := range setup {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			t.Fatalf("plan work: setup %q: %v", s, err)
		}
	}
	if _, err := tx.ExecContext(ctx, "SELECT set_config('plan_cache_mode', $1, true)", mode); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "PREPARE testkit_plan_work AS "+stmt); err != nil {
		t.Fatalf("plan work: prepare: %v\n%s", err, stmt)
	}
	lits := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case nil:
			lits[i] = "NULL"
		case int:
			lits[i] = strconv.Itoa(v)
		case int64:
			lits[i] = strconv.FormatInt(v, 10)
		case string:
			lits[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		default:
			t.Fatalf("plan work: no SQL literal for argument %d, a %T", i+1, a)
		}
	}
	exec := "EXECUTE testkit_plan_work"
	if len(lits) > 0 {
		exec += "(" + strings.Join(lits, ", ") + ")"
	}
	if os.Getenv("TESTKIT_PLAN_TEXT") != "" {
		rows, err := tx.QueryContext(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+exec)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for rows.Next() {
			var l string
			if err := rows.Scan(&l); err != nil {
				t.Fatal(err)
			}
			b.WriteString(l + "\n")
		}
		t.Logf("%s:\n%s", mode, b.String())
		if _, err := tx.ExecContext(ctx, "DEALLOCATE testkit_plan_work"); err != nil {
			t.Fatal(err)
		}
		return Work{}
	}
	var out string
	if err := tx.QueryRowContext(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+exec).Scan(&out); err != nil {
		t.Fatalf("plan work: explain: %v\n%s", err, stmt)
	}
	// Prepared statements belong to the session, not the transaction.
	if _, err := tx.ExecContext(ctx, "DEALLOCATE testkit_plan_work"); err != nil {
		t.Fatal(err)
	}
	var plans []struct {
		Plan struct {
			Hit  int64   `json:"Shared Hit Blocks"`
			Read int64   `json:"Shared Read Blocks"`
			Rows float64 `json:"Actual Rows"`
		}
	}
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("plan work: read the plan: %v\n%s", err, out)
	}
	p := plans[0].Plan
	return Work{Buffers: p.Hit + p.Read, Rows: int64(p.Rows)}
}

// AssertFlat fails the test unless the work at the larger size is at most
// ratio times the work at the smaller one, for each plan mode: a statement
// whose cost is bounded by its batch or an index look-up passes at any
// sizes, one that walks the whole table (or worse) fails at sizes 10x
// apart.
func AssertFlat(t testing.TB, what string, ratio float64, small, large map[string]Work) {
	t.Helper()
	for _, mode := range PlanModes {
		s, l := small[mode], large[mode]
		t.Logf("%s, %s: %d buffers (%d rows) at the small size, %d (%d rows) at the large", what, mode, s.Buffers, s.Rows, l.Buffers, l.Rows)
		if float64(l.Buffers) > ratio*float64(max(s.Buffers, 1)) {
			t.Errorf("%s, %s: %d buffers at the large size, over %.1fx the %d at the small size: its cost grows with the table",
				what, mode, l.Buffers, ratio, s.Buffers)
		}
	}
}

// PlanWorkModes is PlanWork under each of PlanModes.
func PlanWorkModes(t testing.TB, db *sql.DB, setup []string, stmt string, args ...any) map[string]Work {
	t.Helper()
	w := map[string]Work{}
	for _, mode := range PlanModes {
		w[mode] = PlanWork(t, db, mode, setup, stmt, args...)
	}
	return w
}
