package outboxsql

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

// The time limits are bound in each server's unit: MySQL's
// max_execution_time in milliseconds, MariaDB's max_statement_time in
// seconds; a positive limit never rounds to 0, which means none.
func TestMySQLStatementTimeArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		server MySQLServer
		limit  time.Duration
		want   any
	}{
		{ServerMySQL, 1500 * time.Millisecond, int64(1500)},
		{ServerMySQL, 300 * time.Microsecond, int64(1)},
		{ServerMySQL, 0, 0},
		{ServerMariaDB, 1500 * time.Millisecond, 1.5},
		{ServerMariaDB, time.Nanosecond, 1e-6},
		{ServerMariaDB, -time.Second, 0},
	} {
		got := MySQLStatementTimeArgs{Server: tc.server, Limit: tc.limit}.Args()
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("server %d, limit %v: %v, want %v", tc.server, tc.limit, got, tc.want)
		}
	}
	if ServerMySQL.StatementTime() != MySQLMaxExecutionTime || ServerMariaDB.StatementTime() != MariaDBMaxStatementTime {
		t.Error("StatementTime does not pick the server's statement")
	}
	for v, want := range map[string]MySQLServer{
		"8.0.36":                          ServerMySQL,
		"8.4.0-commercial":                ServerMySQL,
		"10.11.6-MariaDB-1:10.11.6+maria": ServerMariaDB,
		"5.5.5-10.6.16-MariaDB-log":       ServerMariaDB,
	} {
		if got := MySQLServerOf(v); got != want {
			t.Errorf("MySQLServerOf(%q) = %d, want %d", v, got, want)
		}
	}
}

// Lock waits are whole seconds, at least 1 (0 would not mean "none").
func TestMySQLLockWaitsArgs(t *testing.T) {
	t.Parallel()
	for limit, want := range map[time.Duration]int64{0: 1, 500 * time.Millisecond: 1, 2500 * time.Millisecond: 2} {
		if got := (MySQLLockWaitsArgs{Wait: limit}).Args(); !slices.Equal(got, []any{want, want}) {
			t.Errorf("%v: %v, want %d twice", limit, got, want)
		}
	}
}

// Lists are bound in the order their placeholders appear.
func TestMySQLMemberArgsOrder(t *testing.T) {
	t.Parallel()
	h := MySQLHandoverArgs{Owner: "me", Shards: []int16{3, 4}, Window: 7}.Args()
	// The lease is compared by the owner's key, the relays' ids by its token.
	if want := []any{"me", int16(3), int16(4), 7, "me", int16(3), int16(4), 7}; len(h) != 9 || !slices.Equal(h[:8], want) ||
		!bytes.Equal(h[8].([]byte), MySQLLeaseKey("me")) {
		t.Errorf("handover: %v, want %v and the key of me", h, want)
	}
	o := MySQLOtherIncarnationsArgs{Name: "a", Own: []string{"x", "y"}, StaleAfter: time.Second}.Args()
	if want := []any{"a", "x", "y", int64(1_000_000)}; !slices.Equal(o, want) {
		t.Errorf("other incarnations: %v, want %v", o, want)
	}
	n, _ := MySQLNamesFor("", "")
	for stmt, args := range map[string][]any{
		MySQLShardsInHandover(n, 2):          h,
		MySQLOtherIncarnations(n, 2):         o,
		MySQLPrune(n, 2):                     MySQLPruneDeleteArgs{IDs: []int64{1, 2}, Retention: time.Hour}.Args(),
		MySQLAcquireShards(n, 2):             MySQLShardsArgs{Owner: "me", Shards: []int16{1, 2}}.Args(),
		MySQLReleaseShards(n, 2):             MySQLShardsArgs{Owner: "me", Shards: []int16{1, 2}}.Args(),
		n.Render(MySQLStatsBacklogScheduled): MySQLCountArgs{Cap: 5, Counts: 2}.Args(),
		n.Render(MySQLStatsDead):             MySQLCountArgs{Cap: 5, Counts: 1}.Args(),
	} {
		if got := strings.Count(stmt, "?"); got != len(args) {
			t.Errorf("%d placeholders, %d arguments:\n%s", got, len(args), stmt)
		}
	}
}
