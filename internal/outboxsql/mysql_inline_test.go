package outboxsql

import (
	"strings"
	"testing"
	"time"
)

func TestMySQLInline(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600))
	got, err := MySQLInline("SELECT ?, ?, '?', `a?`, ?, ?, ?, ?, ?, ?, ?",
		[]any{int64(-7), 3, at, true, false, "it's \\ \x00", []byte{0, 0xff}, 0.25, nil})
	if err != nil {
		t.Fatal(err)
	}
	want := "SELECT -7, 3, '?', `a?`, '2025-01-02 02:04:05.000006', 1, 0, _utf8mb4 X'69742773205c2000', X'00ff', 0.25, NULL"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	for _, c := range []struct {
		stmt string
		args []any
	}{
		{"SELECT ?, ?", []any{1}},
		{"SELECT ?", []any{1, 2}},
		{"SELECT ?", []any{struct{}{}}},
	} {
		if s, err := MySQLInline(c.stmt, c.args); err == nil || !strings.HasPrefix(err.Error(), "outboxsql: inline") {
			t.Errorf("MySQLInline(%q, %v) = %q, %v; want an error", c.stmt, c.args, s, err)
		}
	}
}
