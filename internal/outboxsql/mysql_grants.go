package outboxsql

import "strings"

// The grants check on MySQL and MariaDB (internal/grants.CheckMySQL): what
// has_table_privilege answers on PostgreSQL, read from information_schema,
// which both servers fill with the privileges granted to the session's own
// account. It holds no lock and changes nothing.

// MySQLGrantee reads who the session is and where: CURRENT_USER(), the
// account the server matched (user@host), whose grants apply (USER() is
// the name the client gave, which may differ); the connection's database
// (NULL if it names none); and the roles enabled in the session, whose
// grants information_schema does not show the account (MySQL answers
// 'NONE' when there are none, MariaDB NULL).
const MySQLGrantee = `SELECT CURRENT_USER(), DATABASE(), CURRENT_ROLE()`

// MySQLPrivileges lists the privileges an account holds on the tables of
// one database, at each level a grant can name: every database
// (USER_PRIVILEGES), the database (SCHEMA_PRIVILEGES, whose TABLE_SCHEMA
// is a LIKE pattern, as the server reads a grant ON `shop\_%`.*), both
// with an empty table name, and one table (TABLE_PRIVILEGES). A column
// privilege is not read: the parts need theirs on whole tables. Binds
// MySQLPrivilegesArgs.
const MySQLPrivileges = `SELECT '' AS table_name, PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = ?
UNION ALL
SELECT '', PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE = ? AND ? LIKE TABLE_SCHEMA
UNION ALL
SELECT TABLE_NAME, PRIVILEGE_TYPE FROM information_schema.TABLE_PRIVILEGES WHERE GRANTEE = ? AND TABLE_SCHEMA = ?`

// MySQLPrivilegesArgs binds MySQLPrivileges: the account as
// information_schema spells it ('user'@'host', MySQLGranteeOf) and the
// database.
func MySQLPrivilegesArgs(grantee, database string) []any {
	return []any{grantee, grantee, database, grantee, database}
}

// MySQLGranteeOf is the account CURRENT_USER() answers (user@host) as
// information_schema's GRANTEE spells it, 'user'@'host', and as a GRANT
// names it. The host is after the last '@': a user name may hold one, a
// host cannot.
func MySQLGranteeOf(currentUser string) string {
	at := strings.LastIndex(currentUser, "@")
	if at < 0 {
		return "'" + currentUser + "'"
	}
	return "'" + currentUser[:at] + "'@'" + currentUser[at+1:] + "'"
}

// MySQLVisibleTables lists which of k tables (bound by their unquoted
// names) of the connection's database the session sees: those that exist
// and on which the account holds some privilege.
func MySQLVisibleTables(k int) string {
	return `SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (` + mysqlPlaceholders(k) + `)`
}

// MySQLUnquote is a name MySQLQuote quoted, unquoted.
func MySQLUnquote(quoted string) string {
	if len(quoted) >= 2 && quoted[0] == '`' && quoted[len(quoted)-1] == '`' {
		return strings.ReplaceAll(quoted[1:len(quoted)-1], "``", "`")
	}
	return quoted
}

// mysqlGrantStatements is the statements above, for the grammar test
// (MySQLStatements).
func mysqlGrantStatements() map[string]string {
	return map[string]string{
		"MySQLGrantee":          MySQLGrantee,
		"MySQLPrivileges":       MySQLPrivileges,
		"MySQLVisibleTables(5)": MySQLVisibleTables(5),
	}
}
