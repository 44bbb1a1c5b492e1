package relay

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// CheckGrants passes for a role granted what its doc lists, and names the
// privilege a role lacks, with the GRANT that gives it.
func TestCheckGrantsNamesTheMissingPrivilege(t *testing.T) {
	t.Parallel()
	b := setupInternal(t)
	all := []string{"SELECT, UPDATE, DELETE ON outbox", "SELECT, INSERT, UPDATE, DELETE ON outbox_relays",
		"SELECT, UPDATE ON outbox_shards, outbox_claim_floor", "SELECT ON outbox_schema_migrations"}
	for _, c := range []struct {
		name   string
		grants []string
		want   string // in the error; "" for none
	}{
		{"all", all, ""},
		{"no-delete", append([]string{"SELECT, UPDATE ON outbox"}, all[1:]...), "GRANT DELETE ON"},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := grantedRole(t, b, c.name, c.grants...)
			r, err := New(db, nopPublisher{}, Config{Table: b.db.Table()})
			if err != nil {
				t.Fatal(err)
			}
			err = r.CheckGrants(context.Background())
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("CheckGrants = %v; want nil", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "outbox")):
				t.Fatalf("CheckGrants = %v; want an error with %q on the outbox table", err, c.want)
			}
		})
	}
}

// grantedRole creates a login role with USAGE on the test's schema and
// grants ("SELECT ON outbox"), dropped when the test ends, and returns a
// pool that connects as it.
func grantedRole(t *testing.T, b *internalBundle, kind string, grants ...string) *sql.DB {
	t.Helper()
	name := strings.ReplaceAll("txo_relay_"+kind+"_"+b.db.Schema[len(b.db.Schema)-8:], "-", "_")
	admin := b.db.SQL
	stmts := []string{fmt.Sprintf(`CREATE ROLE %s LOGIN`, name), fmt.Sprintf(`GRANT USAGE ON SCHEMA %q TO %s`, b.db.Schema, name)}
	for _, g := range grants {
		stmts = append(stmts, fmt.Sprintf(`GRANT %s TO %s`, g, name))
	}
	t.Cleanup(func() {
		for _, stmt := range []string{`DROP OWNED BY ` + name + ` CASCADE`, `DROP ROLE ` + name} {
			if _, err := admin.Exec(stmt); err != nil {
				t.Logf("%s: %v", stmt, err)
			}
		}
	})
	for _, stmt := range stmts {
		if _, err := admin.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	u, err := url.Parse(b.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(name)
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
