package main

import (
	"database/sql"
	"flag"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/txoutbox/txoutbox/internal/mysqldsn"
)

// isMySQL reports whether a --database-url names MySQL or MariaDB: a
// mysql:// (or mariadb://) URL, or go-sql-driver/mysql's own DSN, told by
// its address part (user:password@tcp(host:port)/database, @unix(...)).
// Anything else is PostgreSQL's, for pgx to parse: a URL, or a
// keyword/value string (it starts with "keyword=", which a DSN does not).
func isMySQL(raw string) bool {
	if mysqldsn.IsURL(raw) {
		return true
	}
	return !strings.Contains(raw, "://") && !keywordValue.MatchString(raw) && mysqldsn.LooksLikeDSN(raw)
}

// keywordValue is the start of PostgreSQL's keyword/value connection
// string (host=db dbname=shop).
var keywordValue = regexp.MustCompile(`^\s*[A-Za-z_]+\s*=`)

// openMySQL opens raw, a mysql:// URL or the driver's DSN, without
// connecting. The URL gets the DSN parameters txoutbox reads times with
// (mysqldsn.Defaults); a DSN is taken as given. lockTimeout, when
// positive, bounds every wait of the pool's sessions for a table's
// metadata lock (lock_wait_timeout, whole seconds, at least one), as
// status's --lock-timeout does on PostgreSQL.
func openMySQL(raw string, lockTimeout time.Duration) (*sql.DB, error) {
	dsn := raw
	if mysqldsn.IsURL(raw) {
		var err error
		if dsn, err = mysqldsn.FromURL(raw); err != nil {
			return nil, usagef("--database-url: %v", err)
		}
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, usagef("--database-url: %v", err)
	}
	if lockTimeout > 0 {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["lock_wait_timeout"] = strconv.FormatInt(max(int64(lockTimeout/time.Second), 1), 10)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, usagef("--database-url: %v", err)
	}
	return sql.OpenDB(connector), nil
}

// refuseMySQL is the start-up check of a command that does not run on
// MySQL/MariaDB (yet) (the command table's mysql field): a MySQL
// --database-url ends it with one line, before it connects to anything.
func refuseMySQL(fs *flag.FlagSet) error {
	f := fs.Lookup("database-url")
	if f == nil || !isMySQL(f.Value.String()) {
		return nil
	}
	return usagef("%s does not run on MySQL/MariaDB (docs/mysql.md says what does); outbox migrate up, status, down and export, relay, status, dead, replay and ui do", fs.Name())
}

// redactMySQLDSN is the driver's DSN without its password: it sits between
// the first ':' and the last '@' before the address.
func redactMySQLDSN(dsn string) string {
	at := strings.LastIndex(dsn, "@")
	if at < 0 {
		return dsn
	}
	user, _, hasPassword := strings.Cut(dsn[:at], ":")
	if !hasPassword {
		return dsn
	}
	return user + ":xxxxx" + dsn[at:]
}
