package testkit

import (
	"database/sql"
	"testing"
)

// ScanAll reads every row of rows, each as its columns' values (what the
// driver gives for an any), closes rows and fails the test on an error.
func ScanAll(t testing.TB, rows *sql.Rows, err error) [][]any {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]any
	for rows.Next() {
		vals := make([]any, len(cols))
		dest := make([]any, len(cols))
		for i := range dest {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		out = append(out, vals)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
