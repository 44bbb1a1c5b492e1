package console

import (
	"context"
	"crypto/rand"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
)

// shell is what frames every page of a console, whatever outbox it shows:
// the options, the templates, the CSRF key and the checks every request
// passes first (Host, Origin, Authenticate). A Console has one; a Multi
// has one for its index and gives each table's Console its own, with the
// table's name and a CSRF key of its own.
type shell struct {
	opts  Options // defaults set
	log   *slog.Logger
	pages map[string]*template.Template
	csrf  csrf
	hosts hostList

	// table is the table's name in a Multi's pages ("" for a Console
	// alone and for the Multi's own pages); multi marks the Multi's own.
	table string
	multi bool
	// internalError, when set, is told of every request answered 500 (a
	// Multi then looks for its tables again: the table may be gone).
	internalError func()
}

// newShell validates opts and sets their defaults.
func newShell(opts Options) (*shell, error) {
	if opts.SampleEvery < 0 {
		return nil, fmt.Errorf("%w: SampleEvery is negative (%s)", ErrInvalidOptions, opts.SampleEvery)
	}
	if opts.History < 0 {
		return nil, fmt.Errorf("%w: History is negative (%s)", ErrInvalidOptions, opts.History)
	}
	if opts.DiscoverInterval < 0 {
		return nil, fmt.Errorf("%w: DiscoverInterval is negative (%s)", ErrInvalidOptions, opts.DiscoverInterval)
	}
	if opts.SampleEvery == 0 {
		opts.SampleEvery = SampleEveryDefault
	}
	if opts.History == 0 {
		opts.History = HistoryDefault
	}
	if opts.DiscoverInterval == 0 {
		opts.DiscoverInterval = DiscoverIntervalDefault
	}
	if opts.History < opts.SampleEvery {
		return nil, fmt.Errorf("%w: History (%s) is shorter than SampleEvery (%s)", ErrInvalidOptions, opts.History, opts.SampleEvery)
	}
	if opts.Title == "" {
		opts.Title = TitleDefault
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	hosts, err := parseHosts(opts.Hosts)
	if err != nil {
		return nil, err
	}
	key, err := csrfKey()
	if err != nil {
		return nil, err
	}
	pages, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	return &shell{opts: opts, log: opts.Logger, pages: pages, hosts: hosts, csrf: csrf{key: key}}, nil
}

// csrfKey is a new random CSRF key.
func csrfKey() ([]byte, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("console: CSRF key: %w", err)
	}
	return key, nil
}

// forTable is the shell of the table named table in the Multi of s: the
// same options and templates, a CSRF key of its own (a form of one table's
// pages is refused by another's) and a logger that names the table.
func (s *shell) forTable(table string, internalError func()) (*shell, error) {
	key, err := csrfKey()
	if err != nil {
		return nil, err
	}
	t := *s
	t.csrf, t.table, t.multi, t.internalError = csrf{key: key}, table, false, internalError
	t.log = s.log.With("table", table)
	return &t, nil
}

// serve runs the checks every request passes, then next: the security
// headers, the Host and Origin checks, and Authenticate.
func (s *shell) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if r.URL.Path == "" {
		// Mounted at /admin/outbox with StripPrefix("/admin/outbox"): send
		// /admin/outbox to /admin/outbox/, so relative links resolve.
		path, _, _ := strings.Cut(r.RequestURI, "?")
		http.Redirect(w, r, path+"/", http.StatusMovedPermanently)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
	if !s.hosts.allows(r.Host) {
		s.log.Warn("outbox console: refused a request for another host", "host", r.Host, "path", r.URL.Path, "remote", r.RemoteAddr)
		http.Error(w, fmt.Sprintf("this console does not serve the host %q: see Options.Hosts (outbox ui --allow-host)", r.Host), http.StatusMisdirectedRequest)
		return
	}
	if o := r.Header.Get("Origin"); o != "" && !s.hosts.allowsOrigin(o) {
		s.log.Warn("outbox console: refused a request from another origin", "origin", o, "path", r.URL.Path, "remote", r.RemoteAddr)
		http.Error(w, fmt.Sprintf("this console does not serve pages of the origin %q", o), http.StatusForbidden)
		return
	}
	if s.opts.Authenticate != nil {
		op, err := s.opts.Authenticate(r)
		if err != nil {
			s.log.Warn("outbox console: refused an unauthenticated request", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			w.Header().Set("WWW-Authenticate", `Basic realm="outbox console", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), operatorKey{}, op))
	}
	next.ServeHTTP(w, r)
}
