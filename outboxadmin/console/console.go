package console

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/txoutbox/txoutbox/outboxadmin"
)

// TitleDefault is Options.Title's default.
const TitleDefault = "txoutbox"

// SampleEveryDefault is Options.SampleEvery's default.
const SampleEveryDefault = 10 * time.Second

// HistoryDefault is Options.History's default: the overview chart's span.
const HistoryDefault = time.Hour

// ErrInvalidOptions is matched by every error New returns for bad Options.
var ErrInvalidOptions = errors.New("console: invalid options")

// Options configures a Console. The zero value is a read-only console.
type Options struct {
	// AllowWrites enables the actions that change rows: retry and drop of
	// dead events, and replay. Off, the console only reads, and refuses
	// those requests with 403; the pages say which mode it is in.
	AllowWrites bool

	// Logger receives one record per change (what, how many, which ids)
	// and the errors behind a 500. Default slog.Default().
	Logger *slog.Logger

	// Title names the outbox in the pages' header, e.g. "orders (prod)".
	// Default TitleDefault.
	Title string

	// SampleEvery is how often the overview's history takes a sample of
	// backlog, lag, dead count and written events. Default
	// SampleEveryDefault.
	SampleEvery time.Duration

	// History is how far back the overview's chart goes: samples older are
	// dropped. Default HistoryDefault.
	History time.Duration

	// Hosts are the host names the console answers to (the Host header
	// without its port, and an Origin header's host when one is sent);
	// other requests are refused, 421 for the Host and 403 for the
	// Origin. Empty: the loopback names only (localhost, *.localhost and
	// loopback IPs). A browser that a rebinding attack pointed at the
	// console still sends the attacker's name, so only names checked here
	// keep another site's pages from reading and using it. "*" accepts
	// any name: for a console behind an authenticating proxy or
	// Authenticate, whose credentials a rebound name does not carry.
	Hosts []string

	// Authenticate, when set, runs on every request before anything else
	// but the Host check, and returns who makes it: the operator that
	// every change's log line names. An error refuses the request with
	// 401 (and a WWW-Authenticate: Basic challenge). Hook the embedding
	// application's authentication in here, or use TokenAuth.
	Authenticate func(r *http.Request) (operator string, err error)
}

// Console is the web console of one outbox, an http.Handler. Mount it under
// any path prefix with http.StripPrefix; its links are relative. It is safe
// for concurrent use.
type Console struct {
	adm     *outboxadmin.Admin
	opts    Options
	log     *slog.Logger
	handler http.Handler
	pages   map[string]*template.Template
	csrf    csrf
	hist    *history
	status  *statusCache
	hosts   hostList
}

//go:embed assets
var assets embed.FS

// New validates opts and returns the console of the outbox adm works on.
func New(adm *outboxadmin.Admin, opts Options) (*Console, error) {
	if adm == nil {
		return nil, fmt.Errorf("%w: nil *outboxadmin.Admin", ErrInvalidOptions)
	}
	if opts.SampleEvery < 0 {
		return nil, fmt.Errorf("%w: SampleEvery is negative (%s)", ErrInvalidOptions, opts.SampleEvery)
	}
	if opts.History < 0 {
		return nil, fmt.Errorf("%w: History is negative (%s)", ErrInvalidOptions, opts.History)
	}
	if opts.SampleEvery == 0 {
		opts.SampleEvery = SampleEveryDefault
	}
	if opts.History == 0 {
		opts.History = HistoryDefault
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
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("console: CSRF key: %w", err)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	c := &Console{
		adm: adm, opts: opts, log: opts.Logger, pages: pages, hosts: hosts,
		csrf: csrf{key: key},
		hist: newHistory(opts.SampleEvery, opts.History),
	}
	c.status = newStatusCache(adm, opts.SampleEvery, c.hist)
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, fmt.Errorf("console: assets: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /api/overview", c.overviewJSON)
	mux.HandleFunc("GET /relays", c.relays)
	mux.HandleFunc("GET /dead", c.deadList)
	mux.HandleFunc("GET /dead/confirm", c.deadConfirm)
	mux.HandleFunc("POST /dead/retry", c.writes(c.deadRetry))
	mux.HandleFunc("POST /dead/drop", c.writes(c.deadDrop))
	mux.HandleFunc("GET /events", c.events)
	mux.HandleFunc("GET /events/{id}", c.event)
	mux.HandleFunc("GET /replay", c.replayForm)
	mux.HandleFunc("POST /replay", c.writes(c.replay))
	mux.Handle("GET /static/", http.StripPrefix("/static/", noListing(http.FileServerFS(static))))
	// Cross-origin protection rejects a browser's cross-site POST before
	// the token is checked; the token also covers old browsers and clients
	// that send neither Origin nor Sec-Fetch-Site.
	c.handler = http.NewCrossOriginProtection().Handler(mux)
	return c, nil
}

// ServeHTTP serves the console. The request's path is relative to where the
// console is mounted: "/" is the overview.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	if !c.hosts.allows(r.Host) {
		c.log.Warn("outbox console: refused a request for another host", "host", r.Host, "path", r.URL.Path, "remote", r.RemoteAddr)
		http.Error(w, fmt.Sprintf("this console does not serve the host %q: see Options.Hosts (outbox ui --allow-host)", r.Host), http.StatusMisdirectedRequest)
		return
	}
	if o := r.Header.Get("Origin"); o != "" && !c.hosts.allowsOrigin(o) {
		c.log.Warn("outbox console: refused a request from another origin", "origin", o, "path", r.URL.Path, "remote", r.RemoteAddr)
		http.Error(w, fmt.Sprintf("this console does not serve pages of the origin %q", o), http.StatusForbidden)
		return
	}
	if c.opts.Authenticate != nil {
		op, err := c.opts.Authenticate(r)
		if err != nil {
			c.log.Warn("outbox console: refused an unauthenticated request", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			w.Header().Set("WWW-Authenticate", `Basic realm="outbox console", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), operatorKey{}, op))
	}
	c.handler.ServeHTTP(w, r)
}

// noListing answers a directory of the static files with 404.
func noListing(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Run samples the overview's history every Options.SampleEvery until ctx
// ends, so the chart covers the last hour even before anyone opens the
// page. Without Run the console samples only while a page polls it. Run
// returns nil when ctx ends; a failed sample is logged, not fatal.
func (c *Console) Run(ctx context.Context) error {
	t := time.NewTicker(c.opts.SampleEvery)
	defer t.Stop()
	for {
		if _, err := c.readStatus(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("outbox console: sample", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
