// Package grants states which privileges each part of txoutbox needs on
// the outbox tables, and checks a connection has them (Check on
// PostgreSQL, CheckMySQL on MySQL and MariaDB), so a missing grant fails
// at start-up with the GRANT that fixes it instead of a "permission
// denied" in the middle of the work.
package grants

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// Need is the privileges a part needs on one table.
type Need struct {
	// Table is quoted as outboxsql.Names has it: possibly
	// schema-qualified on PostgreSQL, in the connection's database on
	// MySQL.
	Table      string
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

// Check returns an error naming every privilege who (for the message:
// "the relay") lacks on PostgreSQL, with a GRANT per table that gives
// them, or nil.
func Check(ctx context.Context, db *sql.DB, who string, needs []Need) error {
	var role string
	if err := db.QueryRowContext(ctx, `SELECT current_user`).Scan(&role); err != nil {
		return fmt.Errorf("check grants: %w", err)
	}
	var lacks []lack
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
			lacks = append(lacks, lack{table: n.Table, privileges: missing})
		}
	}
	return missingGrants(who, "role "+strconv.Quote(role), strconv.Quote(role), lacks)
}

// lack is the privileges missing on one table.
type lack struct {
	table      string // as the GRANT names it
	privileges []string
	ifExists   bool
}

// missingGrants is the error naming lacks (nil if there are none): what
// who needs that the grantee (account, for the message) lacks, and a
// GRANT per table.
func missingGrants(who, account, grantee string, lacks []lack) error {
	if len(lacks) == 0 {
		return nil
	}
	var needs, stmts []string
	for _, l := range lacks {
		list := strings.Join(l.privileges, ", ")
		needs = append(needs, list+" on "+l.table)
		stmts = append(stmts, "GRANT "+list+" ON "+l.table+" TO "+grantee)
	}
	return fmt.Errorf("missing grant: %s needs %s, which %s lacks: %s", who, strings.Join(needs, " and "), account, strings.Join(stmts, "; "))
}

// CheckMySQL is Check on MySQL and MariaDB, for needs on tables of the
// connection's database (outboxsql.MySQLNamesFor). It reads the
// privileges granted to the session's account (CURRENT_USER()) from
// information_schema, on every database, on the connection's database (a
// grant on a pattern such as `shop\_%`.* included) and on each table, and
// returns an error naming every privilege missing, with a GRANT per table
// that gives them, or nil. A table the account cannot see (it does not
// exist, or the account holds nothing on it) is skipped if IfExists;
// otherwise the error says to migrate if it does not exist.
//
// It reads no role's grants (information_schema shows an account only its
// own): with a role enabled in the session it refuses nothing, and a
// privilege missing fails the first statement that needs it instead. It
// reads no column privileges either: grant on whole tables.
func CheckMySQL(ctx context.Context, db *sql.DB, who string, needs []Need) error {
	var (
		account         string
		database, roles sql.NullString
	)
	if err := db.QueryRowContext(ctx, outboxsql.MySQLGrantee).Scan(&account, &database, &roles); err != nil {
		return fmt.Errorf("check grants: %w", err)
	}
	if !database.Valid || database.String == "" {
		return errors.New("check grants: the connection names no database: name the outbox's in the URL (mysql://USER:PASSWORD@HOST:PORT/DATABASE)")
	}
	if roles.Valid && roles.String != "" && roles.String != "NONE" {
		return nil // a role may grant what the account lacks: see the doc comment
	}
	grantee := outboxsql.MySQLGranteeOf(account)
	held, err := mysqlPrivileges(ctx, db, grantee, database.String)
	if err != nil {
		return err
	}
	var lacks []lack
	for _, n := range needs {
		table := outboxsql.MySQLUnquote(n.Table)
		var missing []string
		for _, p := range n.Privileges {
			if !held[""][p] && !held[strings.ToLower(table)][p] {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			lacks = append(lacks, lack{table, missing, n.IfExists})
		}
	}
	if len(lacks) == 0 {
		return nil
	}
	tables := make([]string, len(lacks))
	for i, l := range lacks {
		tables[i] = l.table
	}
	visible, err := mysqlVisible(ctx, db, tables)
	if err != nil {
		return err
	}
	var (
		found  []lack
		absent []string
	)
	for _, l := range lacks {
		if !visible[strings.ToLower(l.table)] {
			if l.ifExists {
				continue
			}
			absent = append(absent, mysqlQualified(database.String, l.table))
		}
		l.table = mysqlQualified(database.String, l.table)
		found = append(found, l)
	}
	err = missingGrants(who, "user "+grantee, grantee, found)
	if err != nil && len(absent) > 0 {
		// The user sees nothing of these: it holds no privilege on them,
		// or they are not there.
		err = fmt.Errorf("%w (if %s does not exist, run outbox migrate up first)", err, strings.Join(absent, ", "))
	}
	return err
}

// mysqlQualified is table (unquoted) in database, quoted.
func mysqlQualified(database, table string) string {
	return outboxsql.MySQLQuote(database) + "." + outboxsql.MySQLQuote(table)
}

// mysqlPrivileges reads MySQLPrivileges: by table name in lower case, and
// "" for those held on every table of the database.
func mysqlPrivileges(ctx context.Context, db *sql.DB, grantee, database string) (map[string]map[string]bool, error) {
	rows, err := db.QueryContext(ctx, outboxsql.MySQLPrivileges, outboxsql.MySQLPrivilegesArgs(grantee, database)...)
	if err != nil {
		return nil, fmt.Errorf("check grants: %w", err)
	}
	defer rows.Close()
	held := map[string]map[string]bool{}
	for rows.Next() {
		var table, privilege string
		if err := rows.Scan(&table, &privilege); err != nil {
			return nil, fmt.Errorf("check grants: %w", err)
		}
		// Table names compare without case, as they do on a server with
		// lower_case_table_names: at worst a grant on a table whose name
		// differs in case passes here and fails the first statement.
		table = strings.ToLower(table)
		if held[table] == nil {
			held[table] = map[string]bool{}
		}
		held[table][strings.ToUpper(privilege)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("check grants: %w", err)
	}
	return held, nil
}

// mysqlVisible reports which of tables (unquoted) the session sees, by
// name in lower case.
func mysqlVisible(ctx context.Context, db *sql.DB, tables []string) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, outboxsql.MySQLVisibleTables(len(tables)), outboxsql.MySQLIDsArgs[string]{IDs: tables}.Args()...)
	if err != nil {
		return nil, fmt.Errorf("check grants: %w", err)
	}
	defer rows.Close()
	visible := map[string]bool{}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("check grants: %w", err)
		}
		visible[strings.ToLower(t)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("check grants: %w", err)
	}
	return visible, nil
}
