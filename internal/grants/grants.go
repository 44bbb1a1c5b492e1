// Package grants states which PostgreSQL privileges each part of txoutbox
// needs on the outbox tables, and checks a connection has them, so a
// missing grant fails at start-up with the GRANT that fixes it instead of
// a "permission denied" in the middle of the work.
package grants

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// Need is the privileges a part needs on one table.
type Need struct {
	Table      string   // quoted, possibly schema-qualified
	Privileges []string // SELECT, INSERT, UPDATE, DELETE
	// IfExists: a table that does not exist needs nothing. The version
	// table is missing from an outbox migrated by another tool.
	IfExists bool
}

// versions is the SELECT every part but the writer needs on the version
// table: it checks the schema's version at start.
func versions(n outboxsql.Names) Need {
	return Need{n.Versions, []string{"SELECT"}, true}
}

// Writer is what the application's writes need: INSERT alone.
func Writer(n outboxsql.Names) []Need {
	return []Need{{Table: n.Table, Privileges: []string{"INSERT"}}}
}

// Relay is what a relay needs: it claims, marks and prunes events, and
// registers, heartbeats and moves shards.
func Relay(n outboxsql.Names) []Need {
	return []Need{
		{Table: n.Table, Privileges: []string{"SELECT", "UPDATE", "DELETE"}},
		{Table: n.Relays, Privileges: []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
		{Table: n.Shards, Privileges: []string{"SELECT", "UPDATE"}},
		{Table: n.Floor, Privileges: []string{"SELECT", "UPDATE"}},
		versions(n),
	}
}

// Reader is what outbox status, dead list and dead show need.
func Reader(n outboxsql.Names) []Need {
	return []Need{
		{Table: n.Table, Privileges: []string{"SELECT"}},
		{Table: n.Relays, Privileges: []string{"SELECT"}},
		{Table: n.Shards, Privileges: []string{"SELECT"}},
		versions(n),
	}
}

// Operator is what dead retry, dead drop and replay need besides Reader;
// retry and replay lower the claim floor.
func Operator(n outboxsql.Names) []Need {
	return append(Reader(n), Need{Table: n.Table, Privileges: []string{"UPDATE", "DELETE"}}, Need{Table: n.Floor, Privileges: []string{"SELECT", "UPDATE"}})
}

// Check returns an error naming the first missing privilege of who (for
// the message: "the relay") and the GRANT that gives it, or nil.
func Check(ctx context.Context, db *sql.DB, who string, needs []Need) error {
	var role string
	if err := db.QueryRowContext(ctx, `SELECT current_user`).Scan(&role); err != nil {
		return fmt.Errorf("check grants: %w", err)
	}
	for _, n := range needs {
		var exists bool
		if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, n.Table).Scan(&exists); err != nil {
			return fmt.Errorf("check grants on %s: %w", n.Table, err)
		}
		if !exists && n.IfExists {
			continue
		}
		if !exists {
			return fmt.Errorf("table %s does not exist or role %q lacks USAGE on its schema: run outbox migrate up, or GRANT USAGE ON SCHEMA ... TO %q", n.Table, role, role)
		}
		var missing []string
		for _, p := range n.Privileges {
			var ok bool
			if err := db.QueryRowContext(ctx, `SELECT has_table_privilege($1, $2)`, n.Table, p).Scan(&ok); err != nil {
				return fmt.Errorf("check grants on %s: %w", n.Table, err)
			}
			if !ok {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			list := strings.Join(missing, ", ")
			return fmt.Errorf("missing grant: %s needs %s on %s, which role %q lacks: GRANT %s ON %s TO %q",
				who, list, n.Table, role, list, n.Table, role)
		}
	}
	return nil
}
