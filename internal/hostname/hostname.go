// Package hostname normalizes the host names the console answers to and
// tells those that reach the local machine only. The console serves the
// loopback names when its Options.Hosts is empty, and `outbox ui` refuses
// to listen beyond them unguarded: both must agree on what loopback is.
package hostname

import (
	"net"
	"strings"
)

// Normal is host without its port, brackets and trailing dot, in lower
// case: "[::1]:8080" is "::1", "Admin.Example.com." is
// "admin.example.com".
func Normal(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(host, "]"), "["), ".")
	return strings.ToLower(host)
}

// IsLoopback reports whether host names the local machine only:
// localhost, a name under .localhost (RFC 6761), or a loopback IP
// address.
func IsLoopback(host string) bool {
	host = Normal(host)
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
