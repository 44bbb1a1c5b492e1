package mysqlgrammar

import (
	"io/fs"
	"sort"
	"strings"
	"testing"

	"vitess.io/vitess/go/vt/sqlparser"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/migrations"
)

// statements is every statement of the MySQL implementation: those
// internal/outboxsql lists (MySQLStatements), and each statement of the
// MySQL migration files, as the migrator splits them.
func statements(t *testing.T) map[string]string {
	t.Helper()
	out := outboxsql.MySQLStatements()
	for set, fsys := range map[string]fs.FS{"outbox": migrations.Outbox.MySQLFS(), "inbox": migrations.Inbox.MySQLFS()} {
		files, err := fs.Glob(fsys, "*.sql")
		if err != nil || len(files) == 0 {
			t.Fatalf("the %s set's MySQL files: %v %v", set, files, err)
		}
		for _, f := range files {
			b, err := fs.ReadFile(fsys, f)
			if err != nil {
				t.Fatal(err)
			}
			for i, stmt := range outboxsql.SplitStatements(string(b)) {
				out[set+"/"+f+"#"+string(rune('0'+i))] = stmt
			}
		}
	}
	return out
}

func TestEveryStatementParsesAsMySQL8(t *testing.T) {
	t.Parallel()
	parser, err := sqlparser.New(sqlparser.Options{MySQLServerVersion: "8.0.30"})
	if err != nil {
		t.Fatal(err)
	}
	all := statements(t)
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		stmt := all[name]
		if _, err := parser.Parse(stmt); err != nil {
			t.Errorf("%s does not parse as MySQL 8: %v\n%s", name, err, stmt)
		}
	}
	if len(names) < 15 {
		t.Fatalf("only %d statements found: %s", len(names), strings.Join(names, ", "))
	}
}

// TestTheCheckRefusesWhatMySQLDoesNot: the parser is no rubber stamp. Each
// is accepted by PostgreSQL or MariaDB and not by MySQL 8.
func TestTheCheckRefusesWhatMySQLDoesNot(t *testing.T) {
	t.Parallel()
	parser, err := sqlparser.New(sqlparser.Options{MySQLServerVersion: "8.0.30"})
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"INSERT INTO outbox (a) VALUES (?) RETURNING id",
		"INSERT INTO outbox (a) VALUES (?) ON CONFLICT (a) DO NOTHING",
		"SELECT a::text FROM outbox",
		`INSERT INTO "outbox" (a) VALUES (1)`,
	} {
		if _, err := parser.Parse(stmt); err == nil {
			t.Errorf("%q parsed; the check would let it through", stmt)
		}
	}
}
