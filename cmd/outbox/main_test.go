package main

import (
	"strings"
	"testing"
)

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{nil, "usage: outbox"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"migrate"}, "want a subcommand: up, down, status or export"},
		{[]string{"migrate", "export"}, "export: --dir is required"},
		{[]string{"migrate", "export", "--dir", "x", "--format", "flyway"}, `--format: want goose or golang-migrate, not "flyway"`},
		{[]string{"migrate", "sideways"}, "want a subcommand"},
		{[]string{"migrate", "up", "--database-url", "", "--table", "x; drop table y"}, "invalid table name"},
		{[]string{"migrate", "up", "--database-url", ""}, "no database: pass --database-url or set DATABASE_URL"},
		{[]string{"migrate", "up", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"migrate", "up", "--database-url", "x", "extra"}, "unexpected arguments"},
		{[]string{"migrate", "up", "--set", "sideways"}, `--set: want outbox or inbox, not "sideways"`},
	} {
		code, _, errOut := outbox(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.msg) {
			t.Errorf("outbox %v = exit %d, stderr %q; want exit 2 mentioning %q", tc.args, code, errOut, tc.msg)
		}
	}
}
