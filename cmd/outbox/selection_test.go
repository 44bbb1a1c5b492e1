package main

import (
	"fmt"
	"testing"
)

func TestOpsUsageErrors(t *testing.T) {
	t.Parallel()
	e := newOps(t)
	d := e.writeDead(t, "orders", "o-1", "order.placed")
	wantUsageErrors(t, e.run, []usageCase{
		{[]string{"status", "--max-lag", "soon"}, `invalid value "soon" for flag -max-lag`},
		{[]string{"status", "--max-lag", "-1s"}, "--max-lag is negative"},
		{[]string{"status", "--stale-after", "-1s"}, "--stale-after is negative"},
		{[]string{"status", "--table", "x; drop table y"}, "invalid table name"},
		{[]string{"dead"}, "want a subcommand: list, show, retry or drop"},
		{[]string{"dead", "resurrect"}, `unknown subcommand "resurrect"`},
		{[]string{"dead", "list", "--since", "yesterday"}, "want a duration ago (90m, 24h) or an RFC 3339 time"},
		{[]string{"dead", "list", "--since", "-1h"}, "negative duration"},
		{[]string{"dead", "list", "--limit", "0"}, "--limit 0 is outside 1..10000"},
		{[]string{"dead", "list", "--after", "x"}, `invalid value "x" for flag -after`},
		{[]string{"dead", "list", "--state", "dead"}, "flag provided but not defined: -state"},
		{[]string{"dead", "show"}, "want one event ID, got 0 arguments"},
		{[]string{"dead", "show", "abc"}, `bad event ID "abc"`},
		{[]string{"dead", "show", "1", "2"}, "want one event ID, got 2 arguments"},
		{[]string{"dead", "retry"}, "say which events: give IDs, a filter"},
		{[]string{"dead", "retry", "0"}, `bad event ID "0"`},
		{[]string{"dead", "retry", fmt.Sprint(d), "x"}, `bad event ID "x"`},
		{[]string{"dead", "retry", "--all", fmt.Sprint(d)}, "--all cannot be combined with IDs or filters"},
		{[]string{"dead", "retry", "--colour", "red"}, "flag provided but not defined: -colour"},
		{[]string{"dead", "drop", fmt.Sprint(d)}, "pass --yes"},
		{[]string{"dead", "drop", "--all"}, "pass --yes"},
		{[]string{"replay"}, "--since is required"},
		{[]string{"replay", "--since", "last tuesday"}, "want a duration ago"},
		{[]string{"replay", "--since", "1h", "extra"}, "unexpected arguments"},
	})
	// Nothing was touched.
	if s, n := e.state(t, d); s != "dead" || n != 10 {
		t.Errorf("after refused commands the dead row is %s/%d", s, n)
	}
}
