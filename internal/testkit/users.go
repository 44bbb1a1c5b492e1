package testkit

import (
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/mysqldsn"
)

// User is a database login of one test, granted only what the test gave
// it (DB.NewUser).
type User struct {
	// Name is the login's name: a role on PostgreSQL, a user (of any
	// host) on MySQL.
	Name string
	// URL connects as the user to the test's database, as DB.URL does.
	URL string
	// SQL is a pool connected as the user.
	SQL *sql.DB
}

// mysqlUserPassword is the password of every MySQL user NewUser creates:
// loopback test users, dropped at the end of their test.
const mysqlUserPassword = "txoutbox-test-user"

// NewUser creates a login for the test, granted each of grants ("SELECT,
// UPDATE ON outbox": privileges on one table, named as the test's pool
// names it), and drops it when the test ends. On PostgreSQL it is a role
// with USAGE on the test's schema; on MySQL a user of the server, which
// the MySQL server's user (EnvMySQLURL) creates and grants to. Logins are
// server-wide: the name is kind's, with the end of the test's unique
// schema name.
func (d *DB) NewUser(t testing.TB, kind string, grants ...string) User {
	t.Helper()
	name := strings.ReplaceAll("txo_"+kind+"_"+d.Schema[len(d.Schema)-8:], "-", "_")
	u, err := url.Parse(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	exec := func(stmt string) {
		t.Helper()
		if _, err := d.SQL.Exec(stmt); err != nil {
			t.Fatalf("testkit: %s: %v", stmt, err)
		}
	}
	user := User{Name: name}
	if d.mysql {
		account := fmt.Sprintf("'%s'@'%%'", name)
		t.Cleanup(func() {
			if _, err := d.SQL.Exec("DROP USER IF EXISTS " + account); err != nil {
				t.Logf("testkit: drop user %s: %v", account, err)
			}
		})
		exec(fmt.Sprintf("CREATE USER %s IDENTIFIED BY '%s'", account, mysqlUserPassword))
		for _, g := range grants {
			exec("GRANT " + g + " TO " + account)
		}
		u.User = url.UserPassword(name, mysqlUserPassword)
		dsn, err := mysqldsn.FromURL(u.String())
		if err != nil {
			t.Fatal(err)
		}
		if user.SQL, err = sql.Open("mysql", dsn); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Cleanup(func() {
			for _, stmt := range []string{`DROP OWNED BY ` + name + ` CASCADE`, `DROP ROLE ` + name} {
				if _, err := d.SQL.Exec(stmt); err != nil {
					t.Logf("testkit: %s: %v", stmt, err)
				}
			}
		})
		exec(`CREATE ROLE ` + name + ` LOGIN`)
		exec(`GRANT USAGE ON SCHEMA ` + ident.Quote(d.Schema) + ` TO ` + name)
		for _, g := range grants {
			exec(`GRANT ` + g + ` TO ` + name)
		}
		u.User = url.User(name)
		if user.SQL, err = sql.Open("pgx", u.String()); err != nil {
			t.Fatal(err)
		}
	}
	user.URL = u.String()
	t.Cleanup(func() { user.SQL.Close() })
	return user
}
