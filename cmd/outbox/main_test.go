package main

import (
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
)

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	wantUsageErrors(t, outbox, []usageCase{
		{nil, "usage: outbox"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"migrate"}, "want a subcommand: up, down, status, export or partition"},
		{[]string{"migrate", "export"}, "export: --dir is required"},
		{[]string{"migrate", "export", "--dir", "x", "--format", "flyway"}, `--format: want goose or golang-migrate, not "flyway"`},
		{[]string{"migrate", "sideways"}, "want a subcommand"},
		{[]string{"migrate", "up", "--database-url", "", "--table", "x; drop table y"}, "invalid table name"},
		{[]string{"migrate", "up", "--database-url", ""}, "no database: pass --database-url or set DATABASE_URL"},
		{[]string{"migrate", "up", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"migrate", "up", "--database-url", "x", "extra"}, "unexpected arguments"},
		{[]string{"migrate", "up", "--set", "sideways"}, `--set: want outbox or inbox, not "sideways"`},
		{[]string{"dead"}, "want a subcommand: list, show, retry or drop"},
		{[]string{"dead", "--all"}, "want a subcommand: list, show, retry or drop"},
		{[]string{"dead", "frob"}, `unknown subcommand "frob": want list, show, retry or drop`},
		{[]string{"wal"}, "want a subcommand: takeover"},
		{[]string{"wal", "frob"}, `unknown subcommand "frob": want takeover`},
	})
}

// leaves walks the command table: the path and the command of every leaf.
func leaves(path string, cmds []*command, visit func(path string, c *command)) {
	for _, c := range cmds {
		if c.run != nil {
			visit(path+" "+c.name, c)
		}
		leaves(path+" "+c.name, c.subcommands, visit)
	}
}

// Every leaf of the table answers -h with its flags, each naming its
// variable, on the run's own stderr.
func TestEveryCommandHasHelp(t *testing.T) {
	t.Parallel()
	leaves("outbox", commands, func(path string, c *command) {
		args := append(strings.Fields(path)[1:], "-h")
		code, out, errOut := outbox(t, args...)
		if code != 0 || out != "" || !strings.HasPrefix(errOut, "Usage of "+path+":\n") ||
			!strings.Contains(errOut, "[$OUTBOX_DATABASE_URL, $DATABASE_URL]") {
			t.Errorf("%s -h: exit %d, stdout %q, stderr %q", path, code, out, errOut)
		}
	})
	code, _, errOut := outbox(t, "help")
	for _, c := range commands {
		if code != 0 || !strings.Contains(errOut, "\n  "+c.name+" ") || !strings.Contains(errOut, c.summary) {
			t.Errorf("outbox help: exit %d, %q does not list %s", code, errOut, c.name)
		}
	}
}

// The package doc shows the synopsis of every command of the table, and
// of nothing else.
func TestPackageDocListsEveryCommand(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	var doc []string
	for _, line := range strings.Split(f.Doc.Text(), "\n") {
		if strings.HasPrefix(line, "\toutbox ") {
			doc = append(doc, strings.TrimPrefix(line, "\t"))
		}
	}
	var table []string
	leaves("outbox", commands, func(path string, c *command) {
		table = append(table, strings.TrimSpace(path+" "+c.usage))
	})
	for _, line := range table {
		if !slices.Contains(doc, line) {
			t.Errorf("the package doc lacks %q", line)
		}
	}
	for _, line := range doc {
		if !slices.Contains(table, line) {
			t.Errorf("the package doc shows %q, which is no command of the table", line)
		}
	}
}
