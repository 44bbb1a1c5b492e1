package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
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

// DiscoverIntervalDefault is Options.DiscoverInterval's default, a relay
// group's (relay.DiscoverIntervalDefault).
const DiscoverIntervalDefault = 30 * time.Second

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

	// DiscoverInterval is how often a Multi lists its tables again, at the
	// first request after it passed: a new table appears and a dropped one
	// is let go (its pages answer 404). Default DiscoverIntervalDefault. A
	// Console, of one table, ignores it.
	DiscoverInterval time.Duration
}

// Console is the web console of one outbox, an http.Handler. Mount it under
// any path prefix with http.StripPrefix; its links are relative. It is safe
// for concurrent use.
type Console struct {
	*shell
	adm     *outboxadmin.Admin
	handler http.Handler // the pages, without the shell's checks
	hist    *history
	status  *statusCache
}

//go:embed assets
var assets embed.FS

// New validates opts and returns the console of the outbox adm works on.
func New(adm *outboxadmin.Admin, opts Options) (*Console, error) {
	if adm == nil {
		return nil, fmt.Errorf("%w: nil *outboxadmin.Admin", ErrInvalidOptions)
	}
	sh, err := newShell(opts)
	if err != nil {
		return nil, err
	}
	return newConsole(adm, sh)
}

// newConsole is the console of adm's outbox, its pages framed by sh.
func newConsole(adm *outboxadmin.Admin, sh *shell) (*Console, error) {
	c := &Console{shell: sh, adm: adm, hist: newHistory(sh.opts.SampleEvery, sh.opts.History)}
	c.status = newStatusCache(adm, sh.opts.SampleEvery, c.hist)
	static, err := staticFiles()
	if err != nil {
		return nil, err
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
	mux.Handle("GET /static/", static)
	// Cross-origin protection rejects a browser's cross-site POST before
	// the token is checked; the token also covers old browsers and clients
	// that send neither Origin nor Sec-Fetch-Site.
	c.handler = http.NewCrossOriginProtection().Handler(mux)
	return c, nil
}

// ServeHTTP serves the console. The request's path is relative to where the
// console is mounted: "/" is the overview.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.serve(w, r, c.handler)
}

// staticFiles serves the embedded styles and script under /static/.
func staticFiles() (http.Handler, error) {
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, fmt.Errorf("console: assets: %w", err)
	}
	return http.StripPrefix("/static/", noListing(http.FileServerFS(static))), nil
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
