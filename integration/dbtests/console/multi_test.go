package console_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin"
	"github.com/txoutbox/txoutbox/outboxadmin/console"
)

// tenants is a database of schemas prefix_<name>, each with an outbox,
// served by a console.Multi mounted under /admin/outbox/. Its list is the
// catalog's: every prefix_* schema with an outbox table, as
// relay.FindTables would find them.
type tenants struct {
	bundle  // srv, client, base, log; db is the pool of the first tenant
	dbURL   string
	prefix  string
	schemas map[string]*testkit.Schema
	lists   atomic.Int64 // calls of the list function
}

func newTenants(t *testing.T, opts console.Options, names ...string) *tenants {
	t.Helper()
	base := testkit.NewDB(t)
	e := &tenants{dbURL: base.URL, prefix: testkit.SchemaName("mt"), schemas: map[string]*testkit.Schema{}}
	e.log = &testkit.SyncBuffer{}
	for _, n := range names {
		e.add(t, n)
	}
	list := func(ctx context.Context) ([]txoutbox.Table, error) {
		e.lists.Add(1)
		rows, err := base.SQL.QueryContext(ctx, `SELECT n.nspname FROM pg_namespace n JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = 'outbox'
			WHERE starts_with(n.nspname, $1) ORDER BY 1`, e.prefix+"_")
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []txoutbox.Table
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				return nil, err
			}
			out = append(out, txoutbox.Table{Schema: s})
		}
		return out, rows.Err()
	}
	opts.Logger = slog.New(slog.NewTextHandler(e.log, nil))
	m, err := console.NewMulti(base.SQL, outboxadmin.Config{}, list, opts)
	if err != nil {
		t.Fatal(err)
	}
	e.serve(t, m)
	return e
}

// add creates the tenant name's schema with its outbox migrated.
func (e *tenants) add(t *testing.T, name string) *testkit.Schema {
	t.Helper()
	s := testkit.NewSchema(t, e.dbURL, e.prefix+"_"+name, true)
	e.schemas[name] = s
	return s
}

// drop drops the tenant name's schema.
func (e *tenants) drop(t *testing.T, name string) {
	t.Helper()
	if _, err := e.schemas[name].SQL.Exec("DROP SCHEMA " + ident.Quote(e.schemas[name].Name) + " CASCADE"); err != nil {
		t.Fatal(err)
	}
}

// path is the URL path of tenant name's console, relative to the index.
func (e *tenants) path(name string) string { return "tables/" + e.prefix + "_" + name + ".outbox/" }

// seed writes n events to tenant name's outbox, the first dead ones of
// them dead and the rest pending, and returns their ids: the same in
// every tenant seeded alike, each table having its own sequence.
func (e *tenants) seed(t *testing.T, name string, n, dead int) []int64 {
	t.Helper()
	s := e.schemas[name]
	w := testkit.NewWriter(t, s.Table())
	var ids []int64
	for i := range n {
		ev, err := txoutbox.NewEvent("orders", "order", fmt.Sprintf("%s-%d", name, i), "order.placed", map[string]string{"tenant": name})
		if err != nil {
			t.Fatal(err)
		}
		testkit.Commit(t, context.Background(), s.SQL, w, ev)
		// The tenant's schema is the test's own and seeded one event at a
		// time, so its newest row is this event's.
		var id int64
		if err := s.SQL.QueryRow(`SELECT max(id) FROM outbox`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if i < dead {
			if _, err := s.SQL.Exec(`UPDATE outbox SET state = 'dead', attempts = 5, last_error = $2 WHERE id = $1`, id, "refused for "+name); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, id)
	}
	return ids
}

// stateIn is the state of row id in tenant name's outbox.
func (e *tenants) stateIn(t *testing.T, name string, id int64) string {
	t.Helper()
	var s string
	err := e.schemas[name].SQL.QueryRow(`SELECT state FROM outbox WHERE id = $1`, id).Scan(&s)
	if errors.Is(err, sql.ErrNoRows) {
		return "gone"
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wantState fails the test unless row id of tenant name's outbox is in
// state want ("gone": no such row).
func (e *tenants) wantState(t *testing.T, name string, id int64, want, after string) {
	t.Helper()
	if s := e.stateIn(t, name, id); s != want {
		t.Errorf("%s's row %d is %s after %s, want %s", name, id, s, after, want)
	}
}

// row returns the index's row of tenant name, "" if none.
func (e *tenants) row(body, name string) string {
	m := regexp.MustCompile(`<tr data-table="` + regexp.QuoteMeta(e.prefix+"_"+name+".outbox") + `">.*</tr>`).FindString(body)
	return m
}

func cells(row string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<td class="num[^"]*">([^<]*)</td>`).FindAllStringSubmatch(row, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestMultiIndexAndDrillDown(t *testing.T) {
	t.Parallel()
	e := newTenants(t, console.Options{Title: "shop"}, "a", "b")
	e.seed(t, "a", 3, 1)
	bDead := e.seed(t, "b", 2, 2)

	code, body := e.get(t, "")
	if code != http.StatusOK || !strings.Contains(body, "2 table(s)") || !strings.Contains(body, `id="all-tables" class="active"`) ||
		strings.Contains(body, `href="./relays"`) || !csrfMeta.MatchString(body) {
		t.Fatalf("GET index = %d:\n%s", code, body)
	}
	a, b := e.row(body, "a"), e.row(body, "b")
	if got := cells(a); len(got) != 3 || got[0] != "2" || got[2] != "1" || !strings.Contains(a, `href="./`+e.path("a")+`"`) {
		t.Errorf("index row of a = %v:\n%s", got, a)
	}
	if got := cells(b); len(got) != 3 || got[0] != "0" || got[1] != "0s" || got[2] != "2" {
		t.Errorf("index row of b = %v:\n%s", got, b)
	}

	e.wantPages(t, []pageCase{
		{e.path("a"), http.StatusOK, []string{`id="backlog">2<`, `id="dead">1<`, `id="table-name">` + e.prefix + "_a.outbox<", `href="./../../" id="all-tables"`, "shop"}},
		{e.path("b"), http.StatusOK, []string{`id="backlog">0<`, `id="dead">2<`}},
		{e.path("b") + "dead", http.StatusOK, []string{"2 dead event(s) match", "refused for b"}},
		{e.path("a") + "dead", http.StatusOK, []string{"1 dead event(s) match", "refused for a"}},
		{e.path("b") + "events/" + id(bDead[0]), http.StatusOK, []string{"refused for b", `href="../../../" id="all-tables"`}},
		{e.path("a") + "api/overview", http.StatusOK, []string{`"backlog":2`}},
		{e.path("a") + "relays", http.StatusOK, []string{"256 shards"}},
		{e.path("a") + "static/console.css", http.StatusOK, []string{".grid"}},
		{"static/console.css", http.StatusOK, []string{".grid"}},
		{"tables/" + e.prefix + "_nobody.outbox/", http.StatusNotFound, []string{"no such outbox table", `id="all-tables"`}},
		{"tables/" + e.prefix + "_nobody.outbox/dead", http.StatusNotFound, []string{"no such outbox table"}},
		{"?page=2", http.StatusBadRequest, []string{"past the last page"}},
		{"?page=zero", http.StatusBadRequest, []string{"not a page number"}},
		{"?q=%ff", http.StatusBadRequest, []string{"not UTF-8"}},
		{"?q=_b.", http.StatusOK, []string{"1 of 2 table(s)", e.prefix + "_b.outbox"}},
		{"nope", http.StatusNotFound, nil},
	})
	if _, body := e.get(t, "?q=_b."); e.row(body, "a") != "" {
		t.Errorf("a filter for b shows a:\n%s", body)
	}
	// A table's bare path goes to the path with a slash, under the mount.
	resp, err := e.client.Get(e.base + strings.TrimSuffix(e.path("a"), "/"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := "/admin/outbox/" + e.path("a"); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != want {
		t.Errorf("GET a's bare path = %d to %q, want 301 to %s", resp.StatusCode, resp.Header.Get("Location"), want)
	}
}

// An action through one table's URL changes that table only, though the
// other's rows have the same ids; a form of one table's pages does not
// pass on another's.
func TestMultiActionsStayInTheirTable(t *testing.T) {
	t.Parallel()
	e := newTenants(t, console.Options{AllowWrites: true}, "a", "b")
	aIDs := e.seed(t, "a", 3, 2)
	bIDs := e.seed(t, "b", 3, 2)
	if !slices.Equal(aIDs, bIDs) {
		t.Fatalf("the tenants' rows have different ids (%v, %v): the test needs the same", aIDs, bIDs)
	}
	first, second := aIDs[0], aIDs[1]

	// The index first: its CSRF cookie, at the mount path, goes with
	// every table's requests, so only the tables' keys tell their forms
	// apart.
	if code, _ := e.get(t, ""); code != http.StatusOK {
		t.Fatalf("GET index = %d", code)
	}
	tok := e.token(t, e.path("a")+"dead/confirm?action=retry&ids="+id(first))
	// a's token on b's URL is refused, and changes nothing.
	if code, body := e.post(t, e.path("b")+"dead/retry", url.Values{"csrf": {tok}, "ids": {id(first)}}); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("POST b's retry with a's token = %d, want 403:\n%s", code, body)
	}
	if code, body := e.post(t, e.path("a")+"dead/retry", url.Values{"csrf": {tok}, "ids": {id(first)}}); code != http.StatusOK || !strings.Contains(body, "1 event(s) are pending again") {
		t.Fatalf("POST a's retry = %d:\n%s", code, body)
	}
	e.wantState(t, "a", first, "pending", "a's retry")
	e.wantState(t, "b", first, "dead", "a's retry")

	tok = e.token(t, e.path("b")+"dead/confirm?action=drop&ids="+id(second))
	if code, body := e.post(t, e.path("b")+"dead/drop", url.Values{"csrf": {tok}, "ids": {id(second)}}); code != http.StatusOK || !strings.Contains(body, "1 event(s) deleted") {
		t.Fatalf("POST b's drop = %d:\n%s", code, body)
	}
	e.wantState(t, "b", second, "gone", "b's drop")
	e.wantState(t, "a", second, "dead", "b's drop")

	for _, name := range []string{"a", "b"} { // the third row of each published
		if _, err := e.schemas[name].SQL.Exec(`UPDATE outbox SET state = 'published', published_at = now() WHERE id = $1`, aIDs[2]); err != nil {
			t.Fatal(err)
		}
	}
	tok = e.token(t, e.path("b")+"replay?since=1h")
	if code, body := e.post(t, e.path("b")+"replay", url.Values{"csrf": {tok}, "since": {"1h"}}); code != http.StatusOK || !strings.Contains(body, "1 event(s) are pending again") {
		t.Fatalf("POST b's replay = %d:\n%s", code, body)
	}
	e.wantState(t, "b", bIDs[2], "pending", "b's replay")
	e.wantState(t, "a", aIDs[2], "published", "b's replay")
	if log := e.log.String(); !strings.Contains(log, "table="+e.prefix+"_a.outbox") || !strings.Contains(log, "retried dead events") {
		t.Errorf("the change's log line does not name its table:\n%s", log)
	}
}

// A new tenant's table appears without a restart, a dropped one
// disappears and its URLs answer 404.
func TestMultiDiscoversTables(t *testing.T) {
	t.Parallel()
	e := newTenants(t, console.Options{DiscoverInterval: time.Nanosecond}, "a", "b")
	if _, body := e.get(t, ""); e.row(body, "a") == "" || e.row(body, "b") == "" || e.row(body, "new") != "" {
		t.Fatalf("index before the new tenant:\n%s", body)
	}
	e.add(t, "new")
	e.seed(t, "new", 1, 1)
	if _, body := e.get(t, ""); e.row(body, "new") == "" || cells(e.row(body, "new"))[2] != "1" {
		t.Errorf("the new tenant is not on the index:\n%s", body)
	}
	if code, body := e.get(t, e.path("new")+"dead"); code != http.StatusOK || !strings.Contains(body, "refused for new") {
		t.Errorf("GET the new tenant's dead letters = %d:\n%s", code, body)
	}
	e.drop(t, "b")
	for _, p := range []string{e.path("b"), e.path("b") + "dead", e.path("b") + "api/overview"} {
		if code, body := e.get(t, p); code != http.StatusNotFound {
			t.Errorf("GET %s of a dropped table = %d, want 404:\n%s", p, code, body)
		}
	}
	if _, body := e.get(t, ""); e.row(body, "b") != "" || e.row(body, "a") == "" {
		t.Errorf("the index after b was dropped:\n%s", body)
	}
	if log := e.log.String(); strings.Contains(log, "level=ERROR") {
		t.Errorf("errors logged:\n%s", log)
	}
}

// With a long DiscoverInterval, a page that fails because its table was
// dropped has the tables listed again soon: its URLs then answer 404.
func TestMultiFailedPageListsAgain(t *testing.T) {
	t.Parallel()
	e := newTenants(t, console.Options{DiscoverInterval: time.Hour}, "a", "b")
	if code, _ := e.get(t, e.path("b")+"dead"); code != http.StatusOK {
		t.Fatalf("GET b's dead letters = %d", code)
	}
	lists := e.lists.Load()
	if code, _ := e.get(t, ""); code != http.StatusOK || e.lists.Load() != lists {
		t.Errorf("the index listed the tables again within DiscoverInterval (%d, then %d)", lists, e.lists.Load())
	}
	e.drop(t, "b")
	testkit.WaitFor(t, 10*time.Second, "the dropped table's page to answer 404", func() bool {
		code, _ := e.get(t, e.path("b")+"dead")
		return code == http.StatusNotFound
	})
	if code, _ := e.get(t, e.path("a")+"dead"); code != http.StatusOK {
		t.Errorf("GET a's dead letters after b was dropped = %d", code)
	}
}

// The index reads at most one page of tables, each at most once per
// SampleEvery however many look.
func TestMultiIndexCostIsBounded(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	var tables []txoutbox.Table
	for i := range 120 {
		tables = append(tables, txoutbox.Table{Schema: fmt.Sprintf("absent_%03d", i)}) // no such schema: every read fails, and is logged
	}
	log := &testkit.SyncBuffer{}
	m, err := console.NewMulti(db.SQL, outboxadmin.Config{}, func(context.Context) ([]txoutbox.Table, error) { return tables, nil },
		console.Options{Logger: slog.New(slog.NewTextHandler(log, nil)), SampleEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var b bundle
	b.serve(t, m)
	reads := func() int { return strings.Count(log.String(), "read a table's totals") }
	code, body := b.get(t, "")
	if code != http.StatusOK || !strings.Contains(body, "120 table(s), page 1 of 3") || !strings.Contains(body, "absent_049.outbox") ||
		strings.Contains(body, "absent_050.outbox") || !strings.Contains(body, `id="next-page" href="./?page=2"`) || !strings.Contains(body, "could not be read") {
		t.Fatalf("GET index = %d:\n%s", code, body)
	}
	if n := reads(); n != 50 {
		t.Errorf("one page view read %d tables, want 50", n)
	}
	if _, body := b.get(t, ""); reads() != 50 || !strings.Contains(body, "could not be read") {
		t.Errorf("a second view read again: %d reads in all", reads())
	}
	code, body = b.get(t, "?page=3")
	if code != http.StatusOK || !strings.Contains(body, "absent_119.outbox") || strings.Contains(body, "absent_099.outbox") || !strings.Contains(body, `id="prev-page" href="./?page=2"`) {
		t.Errorf("GET page 3 = %d:\n%s", code, body)
	}
	if n := reads(); n != 70 {
		t.Errorf("after pages 1 and 3, %d tables read, want 70", n)
	}
	if strings.Contains(body, "absent") && strings.Contains(body, "does not exist") {
		t.Errorf("the page shows the database's error:\n%s", body)
	}
}

// The Host and Origin checks and Authenticate hold on the index and on
// each table's pages.
func TestMultiHostAndAuth(t *testing.T) {
	t.Parallel()
	e := newTenants(t, console.Options{}, "a")
	rebound := "rebind.attacker.example:8080"
	for _, p := range []string{"", e.path("a"), e.path("a") + "dead", "static/console.css", "tables/x.outbox/"} {
		if code, body := e.do(t, "GET", p, nil, map[string]string{"Host": rebound}); code != http.StatusMisdirectedRequest || strings.Contains(body, e.prefix) {
			t.Errorf("GET %q under a rebound Host = %d, want 421:\n%s", p, code, body)
		}
		if code, _ := e.do(t, "GET", p, nil, map[string]string{"Origin": "http://" + rebound}); code != http.StatusForbidden {
			t.Errorf("GET %q from another Origin = %d, want 403", p, code)
		}
	}
	if code, _ := e.do(t, "GET", "", nil, map[string]string{"Host": "localhost:1"}); code != http.StatusOK {
		t.Errorf("GET index on a loopback name = %d, want 200", code)
	}

	auth, err := console.TokenAuth("0123456789abcdef0123")
	if err != nil {
		t.Fatal(err)
	}
	locked := newTenants(t, console.Options{Authenticate: auth, AllowWrites: true}, "a")
	dead := locked.seed(t, "a", 1, 1)
	for _, p := range []string{"", locked.path("a"), locked.path("a") + "events/" + id(dead[0])} {
		if code, body := locked.get(t, p); code != http.StatusUnauthorized || strings.Contains(body, "refused for a") {
			t.Errorf("GET %q without the token = %d, want 401", p, code)
		}
	}
	locked.client.Transport = basicAuth{user: "carol", pass: "0123456789abcdef0123"}
	if code, _ := locked.get(t, ""); code != http.StatusOK {
		t.Errorf("GET index with the token = %d, want 200", code)
	}
	tok := locked.token(t, locked.path("a")+"dead/confirm?action=drop&ids="+id(dead[0]))
	if code, body := locked.post(t, locked.path("a")+"dead/drop", url.Values{"csrf": {tok}, "ids": {id(dead[0])}}); code != http.StatusOK {
		t.Fatalf("POST drop with the token = %d:\n%s", code, body)
	}
	if log := locked.log.String(); !strings.Contains(log, "operator=carol") || !strings.Contains(log, "dropped dead events") {
		t.Errorf("the drop's log line does not name the operator:\n%s", log)
	}
}

func TestNewMultiRejectsBadOptions(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	list := func(context.Context) ([]txoutbox.Table, error) { return nil, nil }
	for _, tc := range []struct {
		name string
		db   *sql.DB
		cfg  outboxadmin.Config
		list func(context.Context) ([]txoutbox.Table, error)
		opts console.Options
		want string
	}{
		{"no db", nil, outboxadmin.Config{}, list, console.Options{}, "nil *sql.DB"},
		{"no list", db.SQL, outboxadmin.Config{}, nil, console.Options{}, "nil list"},
		{"a table", db.SQL, outboxadmin.Config{Table: txoutbox.Table{Schema: "x"}}, list, console.Options{}, "leave Table zero"},
		{"a slot", db.SQL, outboxadmin.Config{Slot: "s"}, list, console.Options{}, "leave Slot empty"},
		{"bad admin config", db.SQL, outboxadmin.Config{StaleAfter: -time.Second}, list, console.Options{}, "StaleAfter is negative"},
		{"negative discover", db.SQL, outboxadmin.Config{}, list, console.Options{DiscoverInterval: -time.Second}, "DiscoverInterval is negative"},
		{"bad host", db.SQL, outboxadmin.Config{}, list, console.Options{Hosts: []string{"http://x/"}}, "not a host name"},
	} {
		if _, err := console.NewMulti(tc.db, tc.cfg, tc.list, tc.opts); !errors.Is(err, console.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewMulti = %v, want ErrInvalidOptions with %q", tc.name, err, tc.want)
		}
	}
}

// A listing that fails before any succeeded answers 500 without the
// database's message; once one succeeded, a failed one keeps the tables.
func TestMultiListFailure(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	var fail atomic.Bool
	fail.Store(true)
	list := func(context.Context) ([]txoutbox.Table, error) {
		if fail.Load() {
			return nil, errors.New("connect to host db.internal: password authentication failed")
		}
		return []txoutbox.Table{{Schema: db.Schema}}, nil
	}
	log := &testkit.SyncBuffer{}
	m, err := console.NewMulti(db.SQL, outboxadmin.Config{}, list, console.Options{DiscoverInterval: time.Nanosecond, Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var b bundle
	b.serve(t, m)
	if code, body := b.get(t, ""); code != http.StatusInternalServerError || strings.Contains(body, "db.internal") {
		t.Errorf("GET index with the listing failing = %d:\n%s", code, body)
	}
	fail.Store(false)
	if code, body := b.get(t, ""); code != http.StatusOK || !strings.Contains(body, db.Schema+".outbox") {
		t.Fatalf("GET index = %d:\n%s", code, body)
	}
	fail.Store(true)
	if code, body := b.get(t, ""); code != http.StatusOK || !strings.Contains(body, db.Schema+".outbox") {
		t.Errorf("GET index with a later listing failing = %d, want the tables listed before:\n%s", code, body)
	}
	if !strings.Contains(log.String(), "showing those listed before") {
		t.Errorf("the failed listing is not logged:\n%s", log.String())
	}
}
