package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/txoutbox/txoutbox/internal/hostname"
)

// hostList is Options.Hosts, normalized: lower case, no port, no brackets,
// no trailing dot.
type hostList struct {
	any   bool
	names map[string]bool
}

func parseHosts(hosts []string) (hostList, error) {
	l := hostList{names: map[string]bool{}}
	for _, h := range hosts {
		if h == "*" {
			l.any = true
			continue
		}
		// Checked before the port is split off: "http://x/" would leave
		// the name "http". "*" alone is any name; within one it is no
		// pattern, but a name that no Host matches.
		n := hostname.Normal(h)
		if n == "" || strings.ContainsAny(h, "/ ?#@*") {
			return hostList{}, fmt.Errorf("%w: Hosts: %q is not a host name", ErrInvalidOptions, h)
		}
		l.names[n] = true
	}
	return l, nil
}

// allows reports whether the console serves host (a Host header).
func (l hostList) allows(host string) bool {
	if l.any {
		return true
	}
	n := hostname.Normal(host)
	if n == "" {
		return false
	}
	if len(l.names) > 0 {
		return l.names[n]
	}
	return hostname.IsLoopback(n)
}

// allowsOrigin reports whether a request's Origin names a served host.
// "null" (a sandboxed frame, a file) is no origin the console serves.
func (l hostList) allowsOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return l.allows(u.Host)
}

// operatorKey carries Authenticate's operator in a request's context.
type operatorKey struct{}

// operator is who makes the request of ctx as Options.Authenticate named
// them, "" when the console has no Authenticate.
func operator(ctx context.Context) string {
	op, _ := ctx.Value(operatorKey{}).(string)
	return op
}

// ErrUnauthenticated is returned by TokenAuth's function for a request
// without the token.
var ErrUnauthenticated = errors.New("console: missing or wrong credentials")

// TokenAuth returns an Options.Authenticate that admits the requests
// carrying token as the password of HTTP basic authentication, which a
// browser asks for once per session; the user name given is the operator
// the change log lines name ("token" when empty). Use a long random
// token, and TLS (or a tunnel) beyond loopback: basic authentication
// sends it in clear with every request.
func TokenAuth(token string) (func(*http.Request) (string, error), error) {
	if len(token) < 16 {
		return nil, fmt.Errorf("%w: the token has %d bytes, want at least 16", ErrInvalidOptions, len(token))
	}
	want := sha256.Sum256([]byte(token))
	return func(r *http.Request) (string, error) {
		user, pass, ok := r.BasicAuth()
		if !ok {
			return "", ErrUnauthenticated
		}
		got := sha256.Sum256([]byte(pass))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			return "", ErrUnauthenticated
		}
		if user == "" {
			user = "token"
		}
		return user, nil
	}, nil
}
