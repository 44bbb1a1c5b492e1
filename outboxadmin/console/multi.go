package console

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/outboxadmin"
)

// Multi is the web console of many outbox tables of one database (a
// schema per tenant, say), an http.Handler: an index of every table with
// its backlog, lag and dead count, and under /tables/<schema>.<table>/ each
// table's own console, the pages and actions of a Console. A schema whose
// name is not plain is quoted as in SQL ("tenant a".outbox), and the name
// is escaped in the URL (/tables/%22tenant%20a%22.outbox/). Mount it as a
// Console. It is safe for concurrent use.
//
// It lists its tables with the function NewMulti takes, at the first
// request and again once Options.DiscoverInterval has passed: a new
// table appears, a dropped one is let go and its URLs answer 404. A table
// whose page failed with an internal error has the list read again at the
// next request (at most once a second), so a table dropped meanwhile
// answers 404 from then on.
//
// Every request passes the checks of a Console (Host, Origin,
// Authenticate) once, the index's too. Each table's console has a CSRF
// key of its own, so a form of one table's pages does not pass on
// another's, and acts on its own table only.
type Multi struct {
	sh      *shell
	db      *sql.DB
	cfg     outboxadmin.Config // Table set per table
	list    func(context.Context) ([]txoutbox.Table, error)
	handler http.Handler

	finding chan struct{} // held while listing the tables

	mu       sync.Mutex
	tables   map[string]*Console // by name (tableName)
	names    []string            // sorted
	listed   time.Time           // local clock of the last listing, failed or not
	listErr  error               // the last listing's failure, until one succeeds
	everOK   bool                // a listing succeeded once
	retryNow bool                // a page failed: list again at the next request
}

// NewMulti validates cfg and opts and returns the console of the outbox
// tables that list returns, each read and changed through db by an
// outboxadmin.Admin of cfg with its Table set. cfg.Table must be zero;
// cfg.Slot too: each table's WAL slot is its own default (see
// outboxadmin.Config.Slot). list runs with the context of the request that
// found the listing due, without its cancellation; give it its own
// timeout. relay.FindTables lists the tables of a relay group's
// schemas; `outbox ui --schemas` uses it.
func NewMulti(db *sql.DB, cfg outboxadmin.Config, list func(context.Context) ([]txoutbox.Table, error), opts Options) (*Multi, error) {
	switch {
	case db == nil:
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrInvalidOptions)
	case list == nil:
		return nil, fmt.Errorf("%w: nil list of tables", ErrInvalidOptions)
	case cfg.Table != (txoutbox.Table{}):
		return nil, fmt.Errorf("%w: the outboxadmin.Config names the table %s: a Multi's tables are those its list returns; leave Table zero", ErrInvalidOptions, cfg.Table)
	case cfg.Slot != "":
		return nil, fmt.Errorf("%w: the outboxadmin.Config names the slot %q: a Multi's tables have a slot each; leave Slot empty", ErrInvalidOptions, cfg.Slot)
	}
	if _, err := outboxadmin.New(db, cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	sh, err := newShell(opts)
	if err != nil {
		return nil, err
	}
	sh.multi = true
	m := &Multi{sh: sh, db: db, cfg: cfg, list: list, finding: make(chan struct{}, 1), tables: map[string]*Console{}}
	static, err := staticFiles()
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", m.index)
	mux.Handle("GET /static/", static)
	mux.HandleFunc("/tables/{table}", m.toTable)
	mux.HandleFunc("/tables/{table}/", m.table)
	m.handler = mux
	return m, nil
}

// ServeHTTP serves the index at "/" and each table's console under
// /tables/<schema>.<table>/, paths relative to where the Multi is mounted.
func (m *Multi) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.sh.serve(w, r, m.handler)
}

// errNoTable answers the URL of a table the Multi does not serve.
var errNoTable = errors.New("no such outbox table: it is not one the console serves, or it was dropped")

// tableName is a table as a Multi names it, in its index and (escaped)
// its URLs: schema.table, a schema whose name is not plain quoted
// (ident.Readable), so that every table has a name of its own.
func tableName(t txoutbox.Table) string {
	return ident.ReadableQualified(t.Schema, cmp.Or(t.Name, txoutbox.TableNameDefault))
}

// tableHref is the path of table name's console, relative to the index.
func tableHref(name string) string { return "tables/" + url.PathEscape(name) + "/" }

// retryListAfter is how soon after a listing a failed page has the tables
// listed again.
const retryListAfter = time.Second

// current returns the tables, listed again first when that is due.
func (m *Multi) current(ctx context.Context) ([]string, error) {
	if names, ok, err := m.fresh(); ok {
		return names, err
	}
	select {
	case m.finding <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-m.finding }()
	if names, ok, err := m.fresh(); ok { // listed while this one waited
		return names, err
	}
	found, err := m.list(context.WithoutCancel(ctx))
	m.mu.Lock()
	defer m.mu.Unlock()
	m.listed, m.retryNow = time.Now(), false
	if err != nil {
		m.listErr = fmt.Errorf("console: list the tables: %w", err)
		if !m.everOK {
			return nil, m.listErr
		}
		m.sh.log.Warn("outbox console: listing the tables failed; showing those listed before", "err", err)
		return m.names, nil
	}
	m.listErr, m.everOK = nil, true
	m.update(found)
	return m.names, nil
}

// fresh returns the tables, or the failure of the listing before the
// first that succeeded, with ok set, when no listing is due.
func (m *Multi) fresh() (names []string, ok bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	age := time.Since(m.listed)
	if m.listed.IsZero() || age >= m.sh.opts.DiscoverInterval || m.retryNow && age >= retryListAfter {
		return nil, false, nil
	}
	if !m.everOK {
		return nil, true, m.listErr
	}
	return m.names, true, nil
}

// update makes found the tables served: a console for each new one, and
// those gone let go. Called with mu held.
func (m *Multi) update(found []txoutbox.Table) {
	keep := map[string]bool{}
	for _, t := range found {
		name := tableName(t)
		if keep[name] {
			continue
		}
		if m.tables[name] == nil {
			con, err := m.newTable(t, name)
			if err != nil {
				m.sh.log.Warn("outbox console: not serving a listed table", "table", name, "err", err)
				continue
			}
			m.tables[name] = con
			m.sh.log.Info("outbox console: serving a table", "table", name)
		}
		keep[name] = true
	}
	for name := range m.tables {
		if !keep[name] {
			delete(m.tables, name)
			m.sh.log.Info("outbox console: a table is gone; no longer serving it", "table", name)
		}
	}
	// A new slice: callers keep the last one.
	m.names = make([]string, 0, len(m.tables))
	for name := range m.tables {
		m.names = append(m.names, name)
	}
	slices.Sort(m.names)
}

// newTable is the console of table t.
func (m *Multi) newTable(t txoutbox.Table, name string) (*Console, error) {
	cfg := m.cfg
	cfg.Table = t
	adm, err := outboxadmin.New(m.db, cfg)
	if err != nil {
		return nil, err
	}
	sh, err := m.sh.forTable(name, m.listSoon)
	if err != nil {
		return nil, err
	}
	return newConsole(adm, sh)
}

// listSoon has the tables listed again at the next request.
func (m *Multi) listSoon() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retryNow = true
}

// lookup returns the console of the table named name, nil if none.
func (m *Multi) lookup(ctx context.Context, name string) (*Console, error) {
	if _, err := m.current(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tables[name], nil
}

// table serves /tables/<name>/...: the table's console, mounted there.
func (m *Multi) table(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("table")
	con, err := m.lookup(r.Context(), name)
	if err != nil {
		m.sh.fail(w, r, err)
		return
	}
	if con == nil {
		m.sh.fail(w, r, errNoTable)
		return
	}
	con.handler.ServeHTTP(w, underTable(r))
}

// underTable is r for the console of the table its path names: the path
// after /tables/<name>, as http.StripPrefix would give it, but cut in the
// escaped path, where a "/" of the name is still %2F.
func underTable(r *http.Request) *http.Request {
	_, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), "/tables/"), "/")
	rest = "/" + rest
	r2 := new(http.Request)
	*r2 = *r
	r2.URL = new(url.URL)
	*r2.URL = *r.URL
	r2.URL.RawPath = rest
	if p, err := url.PathUnescape(rest); err == nil {
		r2.URL.Path = p
	}
	return r2
}

// toTable sends /tables/<name> to /tables/<name>/, where the table's
// relative links resolve.
func (m *Multi) toTable(w http.ResponseWriter, r *http.Request) {
	path, _, _ := strings.Cut(r.RequestURI, "?")
	http.Redirect(w, r, path+"/", http.StatusMovedPermanently)
}

// indexPage is the most tables one page of the index shows, and
// indexReaders the most it reads at once.
const (
	indexPage    = 50
	indexReaders = 4
)

// indexRow is one table on the index.
type indexRow struct {
	Name string
	Href string // relative to the index
	outboxadmin.Snapshot
	Failed bool // its figures could not be read: the log says why
}

type indexData struct {
	Q       string
	Rows    []indexRow
	Total   int // the tables served
	Matched int // those Q matches
	Page    int
	Pages   int
	// Prev and Next are the query strings of the neighbour pages, ""
	// when none; url.Values.Encode's output, safe in an href.
	Prev, Next template.URL
	// Every is how old the figures may be (SampleEvery, more while a
	// table's counts are slow).
	Every time.Duration
}

// index lists the tables, a page of indexPage at a time, with each one's
// totals (statusCache.readTotals).
func (m *Multi) index(w http.ResponseWriter, r *http.Request) {
	v, err := query(r)
	if err != nil {
		m.sh.fail(w, r, err)
		return
	}
	q, err := text(v, "q")
	if err != nil {
		m.sh.fail(w, r, err)
		return
	}
	pageNo := 1
	if s := v.Get("page"); s != "" {
		if pageNo, err = strconv.Atoi(s); err != nil || pageNo < 1 {
			m.sh.fail(w, r, badf("page: %q is not a page number (1, 2, ...)", s))
			return
		}
	}
	names, err := m.current(r.Context())
	if err != nil {
		m.sh.fail(w, r, err)
		return
	}
	var matched []string
	for _, n := range names {
		if strings.Contains(n, q) {
			matched = append(matched, n)
		}
	}
	d := indexData{Q: q, Total: len(names), Matched: len(matched), Page: pageNo, Pages: max(1, (len(matched)+indexPage-1)/indexPage), Every: m.sh.opts.SampleEvery}
	if pageNo > d.Pages {
		m.sh.fail(w, r, badf("page: %d is past the last page, %d", pageNo, d.Pages))
		return
	}
	shown := matched[(pageNo-1)*indexPage : min(pageNo*indexPage, len(matched))]
	m.mu.Lock()
	cons := make([]*Console, len(shown))
	for i, n := range shown {
		cons[i] = m.tables[n]
	}
	m.mu.Unlock()
	d.Rows = m.readRows(r.Context(), shown, cons)
	link := func(p int) template.URL {
		l := url.Values{}
		if q != "" {
			l.Set("q", q)
		}
		if p > 1 {
			l.Set("page", strconv.Itoa(p))
		}
		return template.URL("?" + l.Encode())
	}
	if pageNo > 1 {
		d.Prev = link(pageNo - 1)
	}
	if pageNo < d.Pages {
		d.Next = link(pageNo + 1)
	}
	m.sh.render(w, r, http.StatusOK, "index", "index", d)
}

// readRows reads the totals of the tables of one index page,
// indexReaders at a time. A table that cannot be read shows as such and
// its error is logged.
func (m *Multi) readRows(ctx context.Context, names []string, cons []*Console) []indexRow {
	rows := make([]indexRow, len(names))
	sem := make(chan struct{}, indexReaders)
	var wg sync.WaitGroup
	for i, name := range names {
		rows[i] = indexRow{Name: name, Href: tableHref(name)}
		if cons[i] == nil { // let go since the listing
			rows[i].Failed = true
			continue
		}
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				rows[i].Failed = true
				return
			}
			defer func() { <-sem }()
			s, fresh, err := cons[i].status.readTotals(ctx)
			if err != nil {
				rows[i].Failed = true
				if fresh {
					cons[i].log.Warn("outbox console: read a table's totals for the index", "err", err)
				}
				return
			}
			rows[i].Snapshot = s
		})
	}
	wg.Wait()
	return rows
}
