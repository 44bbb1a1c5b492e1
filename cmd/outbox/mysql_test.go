package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// TestMigrateOnEveryEngine: migrate up, status and down, on PostgreSQL
// with --schema and on MySQL with the database in the URL; on MySQL the
// driver's DSN names the same database as the mysql:// URL.
func TestMigrateOnEveryEngine(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		db := testkit.NewDBOn(t, e)
		flags := []string{"--database-url", db.URL}
		other := flags // another spelling of the same database
		if e == testkit.Postgres {
			flags = append(flags, "--schema", db.Schema)
			other = flags
		} else {
			other = []string{"--database-url", db.DSN()}
		}
		code, out, errOut := outbox(t, append([]string{"migrate", "up"}, flags...)...)
		if code != 0 || !strings.Contains(out, "applied version(s) 1") {
			t.Fatalf("migrate up: exit %d, %q %q", code, out, errOut)
		}
		var n int
		if err := db.SQL.QueryRow(`SELECT count(*) FROM outbox`).Scan(&n); err != nil {
			t.Fatalf("after migrate up, the outbox table: %v", err)
		}
		code, out, errOut = outbox(t, append([]string{"migrate", "up"}, other...)...)
		if code != 0 || !strings.Contains(out, "schema is up to date") {
			t.Fatalf("second migrate up: exit %d, %q %q", code, out, errOut)
		}
		code, out, errOut = outbox(t, append([]string{"migrate", "status"}, other...)...)
		if code != 0 || !strings.Contains(out, "0001") || strings.Contains(out, "pending") {
			t.Fatalf("migrate status: exit %d, %q %q", code, out, errOut)
		}
		code, out, errOut = outbox(t, append([]string{"migrate", "down"}, flags...)...)
		if code != 0 || !strings.Contains(out, "reverted version") {
			t.Fatalf("migrate down: exit %d, %q %q", code, out, errOut)
		}
		code, out, errOut = outbox(t, append([]string{"migrate", "status"}, flags...)...)
		if code != 0 || !strings.Contains(out, "pending") {
			t.Fatalf("migrate status after down: exit %d, %q %q", code, out, errOut)
		}
		code, out, errOut = outbox(t, append([]string{"migrate", "up", "--set", "inbox"}, flags...)...)
		if code != 0 || !strings.Contains(out, "applied version(s) 1\n") {
			t.Fatalf("migrate up --set inbox: exit %d, %q %q", code, out, errOut)
		}
		if err := db.SQL.QueryRow(`SELECT count(*) FROM inbox`).Scan(&n); err != nil {
			t.Fatalf("after migrate up --set inbox, the inbox table: %v", err)
		}
	})
}

// TestMigrateExportForMySQL: a MySQL --database-url exports MySQL's
// files, without connecting.
func TestMigrateExportForMySQL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, out, errOut := outbox(t, "migrate", "export", "--format", "goose", "--dir", dir, "--table", "events",
		"--database-url", "mysql://nobody@127.0.0.1:1/shop")
	if code != 0 || !strings.Contains(out, "0001_outbox.sql") {
		t.Fatalf("migrate export: exit %d, %q %q", code, out, errOut)
	}
	body, err := os.ReadFile(filepath.Join(dir, "0001_outbox.sql"))
	if err != nil || !strings.Contains(string(body), "CREATE TABLE IF NOT EXISTS `events`") {
		t.Fatalf("exported goose file: %v\n%s", err, body)
	}
}

// TestMySQLRefusedWhereItDoesNotRunYet: every command that does not run on
// MySQL (outbox wal) refuses a MySQL database at once (exit 2, one line
// naming docs/mysql.md), in either spelling and from DATABASE_URL too,
// before it connects: the server named here does not exist; and so do the
// flags of PostgreSQL alone on the commands that run there.
func TestMySQLRefusedWhereItDoesNotRunYet(t *testing.T) {
	t.Parallel()
	for _, url := range []string{"mysql://app:secret@127.0.0.1:1/shop", "app:secret@tcp(127.0.0.1:1)/shop"} {
		commands := [][]string{
			{"wal", "takeover"},
		}
		var cases []usageCase
		for _, c := range commands {
			cases = append(cases, usageCase{args: append(c, "--database-url", url), msg: "does not run on MySQL/MariaDB (docs/mysql.md"})
		}
		cases = append(cases,
			usageCase{args: []string{"migrate", "up", "--schemas", "tenant_*", "--database-url", url}, msg: "--schemas: not on MySQL/MariaDB"},
			usageCase{args: []string{"migrate", "status", "--schema", "shop", "--database-url", url}, msg: "--schema: on MySQL/MariaDB a schema is a database"},
			usageCase{args: []string{"migrate", "partition", "--database-url", url}, msg: "not partitioned (see docs/mysql.md)"},
			usageCase{args: []string{"status", "--schemas", "tenant_*", "--database-url", url}, msg: "--schemas: not on MySQL/MariaDB"},
			usageCase{args: []string{"ui", "--schemas", "tenant_*", "--database-url", url}, msg: "--schemas: not on MySQL/MariaDB"},
			usageCase{args: []string{"status", "--slot", "s", "--database-url", url}, msg: "--slot: MySQL/MariaDB has no WAL relay"},
			usageCase{args: []string{"dead", "retry", "1", "--slot", "s", "--database-url", url}, msg: "--slot: MySQL/MariaDB has no WAL relay"},
			usageCase{args: []string{"replay", "--since", "1h", "--slot", "s", "--database-url", url}, msg: "--slot: MySQL/MariaDB has no WAL relay"},
			usageCase{args: []string{"ui", "--slot", "s", "--database-url", url}, msg: "--slot: MySQL/MariaDB has no WAL relay"},
		)
		wantUsageErrors(t, outbox, cases)
		for _, c := range commands {
			code, _, errOut := outboxEnv(t, map[string]string{"DATABASE_URL": url}, c...)
			if code != exitUsage || strings.Count(strings.TrimSpace(errOut), "\n") > 1 || !strings.Contains(errOut, "docs/mysql.md") {
				t.Errorf("DATABASE_URL=%s outbox %v = exit %d, stderr %q; want exit 2 and one line naming docs/mysql.md", url, c, code, errOut)
			}
			if strings.Contains(errOut, "secret") {
				t.Errorf("outbox %v printed the password: %q", c, errOut)
			}
		}
	}
}

// TestDatabaseURLForms: how --database-url is told MySQL's from
// PostgreSQL's.
func TestDatabaseURLForms(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]bool{
		"postgres://app:secret@db:5432/shop":          false,
		"postgresql://db/shop?sslmode=disable":        false,
		"host=db user=app password=p@tcp(x) dbname=s": false, // no scheme, but keyword/value: pgx's
		"host=/var/run/postgresql dbname=shop":        false,
		"mysql://app:secret@db:3306/shop":             true,
		"mariadb://app@db/shop":                       true,
		"app:secret@tcp(db:3306)/shop?parseTime=true": true,
		"app@unix(/run/mysqld/mysqld.sock)/shop":      true,
	} {
		if got := isMySQL(raw); got != want {
			t.Errorf("isMySQL(%q) = %v, want %v", raw, got, want)
		}
	}
	if got := redactDatabaseURL("app:s3cr:et@tcp(db:3306)/shop"); got != "app:xxxxx@tcp(db:3306)/shop" {
		t.Errorf("redacted DSN = %q", got)
	}
}

// TestRelayOnMySQL: outbox relay on a MySQL --database-url, in either
// spelling, publishes what the MySQL Writer committed, in order.
func TestRelayOnMySQL(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutboxOn(t, testkit.MySQL)
	w := db.Writer(t)
	for i, flags := range [][]string{{"--database-url", db.URL}, {"--database-url", db.DSN()}} {
		brokers := kafkatest.New(t).ListenAddrs()
		var want []string
		for n := range 3 {
			ev, err := txoutbox.NewEvent("orders", "order", "o-1", "order.placed", json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)))
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, ev.ID.String())
			testkit.Commit(t, context.Background(), db.SQL, w, ev)
		}
		b := startOutbox(t, map[string]string{"OUTBOX_BROKERS": strings.Join(brokers, ",")},
			append([]string{"relay", "--poll-interval", "50ms", "--heartbeat", "100ms", "--stale-after", "1s", "--lease", "2s"}, flags...)...)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var got []string
		err := kafkatest.Consume(ctx, brokers, []string{"orders"}, 0, func(r *kgo.Record) bool {
			got = append(got, kafkatest.Header(r, txoutbox.HeaderEventID))
			return len(got) < len(want)
		})
		cancel()
		if err != nil {
			t.Fatalf("spelling %d: consume: %v (relay stderr %s)", i, err, b.stderr.String())
		}
		// Each spelling's events: the first relay published its own and
		// stopped, so the second finds only the new ones.
		if !slices.Equal(got, want) {
			t.Fatalf("spelling %d: published %v, want %v in order", i, got, want)
		}
		b.wantCleanStop(t)
	}
}

// TestRelayOnMySQLRefusals: what the polling relay cannot do on MySQL is
// refused at start-up, exit 2, naming docs/mysql.md where it is a MySQL
// matter; the server named here does not exist.
func TestRelayOnMySQLRefusals(t *testing.T) {
	t.Parallel()
	const url = "mysql://app:secret@127.0.0.1:1/shop"
	wantUsageErrors(t, outbox, []usageCase{
		{args: []string{"relay", "--dev-broker", "--mode", "wal", "--database-url", url}, msg: "--mode wal: reads PostgreSQL's write-ahead log; on MySQL/MariaDB run --mode poll (see docs/mysql.md)"},
		{args: []string{"relay", "--dev-broker", "--schemas", "tenant_*", "--database-url", url}, msg: "--schemas: a relay of many tables does not run on MySQL/MariaDB yet"},
		{args: []string{"relay", "--dev-broker", "--schema", "shop", "--database-url", url}, msg: "--schema: on MySQL/MariaDB a schema is a database"},
	})
}

// TestStatusOnALockedMySQLTable: status on a MySQL table another session
// holds (LOCK TABLES ... WRITE, as an ALTER TABLE's exclusive phase does)
// answers within --lock-timeout (whole seconds there) and fails (exit 1),
// saying who holds the lock cannot be listed on MySQL.
func TestStatusOnALockedMySQLTable(t *testing.T) {
	t.Parallel()
	e := newOpsOn(t, testkit.MySQL)
	e.write(t, "orders", "o-1", "order.placed")
	ctx := context.Background()
	conn, err := e.db.SQL.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `LOCK TABLES outbox WRITE`); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := statusWithin(t, 15*time.Second, append([]string{"--lock-timeout", "1s"}, e.flags...)...)
	if code != 1 || !strings.Contains(errOut, "is locked by another session") || !strings.Contains(out, "not listed on MySQL/MariaDB") {
		t.Errorf("status of a locked table: exit %d, stdout %q, stderr %q; want exit 1, the lock said, its holder not listed", code, out, errOut)
	}
	code, out, _ = statusWithin(t, 15*time.Second, append([]string{"--lock-timeout", "1s", "--json"}, e.flags...)...)
	if code != 1 || !strings.Contains(out, `"locked": true`) {
		t.Errorf("status --json of a locked table: exit %d, stdout %q", code, out)
	}
	if _, err := conn.ExecContext(ctx, `UNLOCK TABLES`); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := statusWithin(t, 15*time.Second, e.flags...); code != 0 {
		t.Errorf("status once the table is free: exit %d, %s", code, errOut)
	}
}
