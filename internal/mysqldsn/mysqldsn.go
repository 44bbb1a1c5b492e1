// Package mysqldsn turns a mysql:// URL into the data source name
// github.com/go-sql-driver/mysql takes, without importing the driver, so
// the packages that parse a --database-url do not bring it into every
// user's build.
package mysqldsn

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// IsURL reports whether s is a mysql:// URL (or mariadb://).
func IsURL(s string) bool {
	return strings.HasPrefix(s, "mysql://") || strings.HasPrefix(s, "mariadb://")
}

// LooksLikeDSN reports whether s is in go-sql-driver/mysql's own form,
// user:password@tcp(host:port)/database?params.
func LooksLikeDSN(s string) bool {
	return strings.Contains(s, "@tcp(") || strings.Contains(s, "@unix(") || strings.HasPrefix(s, "tcp(") || strings.HasPrefix(s, "unix(")
}

// Defaults are the parameters every DSN gets unless the URL sets them:
// DATETIME columns read as time.Time, in UTC, the zone txoutbox writes
// times in.
var Defaults = map[string]string{"parseTime": "true", "loc": "UTC"}

// FromURL converts mysql://USER:PASSWORD@HOST:PORT/DATABASE?params (port
// 3306 by default) to USER:PASSWORD@tcp(HOST:PORT)/DATABASE?params with
// Defaults added. The query's parameters are the driver's (tls, timeout,
// ...). A password holding a '/' cannot be expressed in the driver's
// form and is refused.
func FromURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("parse MySQL URL: %w", err)
	}
	if u.Scheme != "mysql" && u.Scheme != "mariadb" {
		return "", fmt.Errorf("parse MySQL URL: scheme %q is not mysql://", u.Scheme)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return "", fmt.Errorf("parse MySQL URL: it names no database (mysql://USER:PASSWORD@HOST:PORT/DATABASE)")
	}
	host := u.Hostname()
	if host == "" {
		host = "127.0.0.1"
	}
	port := u.Port()
	if port == "" {
		port = "3306"
	}
	var b strings.Builder
	if u.User != nil {
		b.WriteString(u.User.Username())
		if p, ok := u.User.Password(); ok {
			if strings.Contains(p, "/") {
				return "", errors.New("parse MySQL URL: a password with '/' cannot be passed to the driver; use its DSN form")
			}
			b.WriteString(":" + p)
		}
		b.WriteByte('@')
	}
	b.WriteString("tcp(" + net.JoinHostPort(host, port) + ")/" + db)
	q := u.Query()
	for k, v := range Defaults {
		if !q.Has(k) {
			q.Set(k, v)
		}
	}
	b.WriteString("?" + q.Encode())
	return b.String(), nil
}
