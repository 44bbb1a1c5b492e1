package engines_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/relaytest"
)

// relayGrants is what Relay.CheckGrants's doc lists, one table a grant (a
// MySQL GRANT names one).
var relayGrants = []string{
	"SELECT, UPDATE, DELETE ON outbox",
	"SELECT, INSERT, UPDATE, DELETE ON outbox_relays",
	"SELECT, UPDATE ON outbox_shards",
	"SELECT, UPDATE ON outbox_claim_floor",
	"SELECT ON outbox_schema_migrations",
}

// CheckGrants passes for a user granted what its doc lists, on the tables
// or on the whole schema (a database on MySQL, by name or by pattern), and
// for the tests' own user; it names every privilege a user lacks, on each
// table, with the GRANTs that give them.
func TestCheckGrantsNamesTheMissingPrivilege(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		db := testkit.NewOutboxOn(t, e)
		mysql := e == testkit.MySQL
		// The whole schema, and on MySQL a database pattern matching the
		// test's database: SHOW GRANTS's `t\_x%`.*.
		wholeSchema := []string{fmt.Sprintf("SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %q", db.Schema)}
		pattern := wholeSchema
		if mysql {
			wholeSchema = []string{"SELECT, INSERT, UPDATE, DELETE ON " + outboxsql.MySQLQuote(db.Schema) + ".*"}
			prefix := strings.ReplaceAll(db.Schema[:len(db.Schema)-3], "_", `\_`)
			pattern = []string{"SELECT, INSERT, UPDATE, DELETE ON " + outboxsql.MySQLQuote(prefix+"%") + ".*"}
		}
		for _, c := range []struct {
			name   string
			grants []string
			want   []string // in the error; none for nil
		}{
			{"all", relayGrants, nil},
			{"schema", wholeSchema, nil},
			{"pattern", pattern, nil},
			{"nodelete", append([]string{"SELECT, UPDATE ON outbox"}, relayGrants[1:]...),
				[]string{"missing grant: the relay needs DELETE on", "outbox", "GRANT DELETE ON"}},
			{"twotables", append([]string{"SELECT, UPDATE ON outbox", relayGrants[1], relayGrants[2], "SELECT ON outbox_claim_floor"}, relayGrants[4:]...),
				[]string{"the relay needs DELETE on", "outbox", " and UPDATE on ", "outbox_claim_floor", "GRANT DELETE ON", "; GRANT UPDATE ON"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				u := db.NewUser(t, c.name, c.grants...)
				err := checkGrants(t, u.SQL, db)
				switch {
				case c.want == nil && err != nil:
					t.Fatalf("CheckGrants = %v; want nil", err)
				case c.want != nil && err == nil:
					t.Fatalf("CheckGrants = nil; want an error with %q", c.want)
				case err != nil:
					t.Logf("CheckGrants: %v", err)
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("CheckGrants = %v; want %q in it", err, w)
					}
				}
			})
		}
		t.Run("owner", func(t *testing.T) {
			if err := checkGrants(t, db.SQL, db); err != nil {
				t.Fatalf("CheckGrants as the tests' own user = %v; want nil", err)
			}
		})
	})
}

// Privileges held through a role: PostgreSQL's check sees them; MySQL's
// cannot (information_schema shows a user only its own), so with a role
// enabled it refuses nothing, as Relay.CheckGrants says.
func TestCheckGrantsThroughARole(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, e testkit.Engine) {
		db := testkit.NewOutboxOn(t, e)
		group := db.NewUser(t, "group", relayGrants...)
		// One privilege of its own: on MySQL a user with none on a database
		// cannot connect to it.
		u := db.NewUser(t, "member", relayGrants[4])
		if err := checkGrants(t, u.SQL, db); err == nil || !strings.Contains(err.Error(), "missing grant") {
			t.Fatalf("CheckGrants without the role = %v; want a missing grant", err)
		}
		if e == testkit.MySQL {
			// MariaDB's spelling (MySQL 8: SET DEFAULT ROLE ... TO):
			// a user is not a role there, so the role is one of its own.
			role := group.Name + "_r"
			stmts := []string{"CREATE ROLE " + role}
			for _, g := range relayGrants {
				stmts = append(stmts, "GRANT "+g+" TO "+role)
			}
			stmts = append(stmts, "GRANT "+role+" TO '"+u.Name+"'@'%'", "SET DEFAULT ROLE "+role+" FOR '"+u.Name+"'@'%'")
			t.Cleanup(func() { db.SQL.Exec("DROP ROLE IF EXISTS " + role) })
			for _, s := range stmts {
				if _, err := db.SQL.Exec(s); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
			u.SQL.SetMaxIdleConns(0) // connect again: the default role applies at log-in
		} else if _, err := db.SQL.Exec("GRANT " + group.Name + " TO " + u.Name); err != nil {
			t.Fatal(err)
		}
		if err := checkGrants(t, u.SQL, db); err != nil {
			t.Fatalf("CheckGrants with the role = %v; want nil", err)
		}
	})
}

// checkGrants is Relay.CheckGrants of a relay on conn for db's table.
func checkGrants(t *testing.T, conn *sql.DB, db *testkit.DB) error {
	t.Helper()
	r, err := relay.New(conn, relaytest.NewPublisher(), relay.Config{Table: db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.CheckGrants(ctx)
}
