package relay

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// fleet is a group test's database: schemas named prefix_<name>, each
// with an outbox table, and the group's own pool, whose connections carry
// application_name prefix so the test can count them.
type fleet struct {
	base   *testkit.DB
	prefix string
	db     *sql.DB // the group's
	tables map[string]*testkit.Schema
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	return newFleetOf(t, testkit.NewDB(t))
}

// newFleetApart is newFleet in a database of the test's own, for a test
// that needs the unqualified channel quiet: NOTIFY is per database, and in
// the shared one any other test's writer of an unqualified table, or
// relay of one announcing a rebalance, wakes the fleet's relays.
func newFleetApart(t *testing.T) *fleet {
	t.Helper()
	s := testkit.NewSchema(t, testkit.NewDatabase(t), testkit.SchemaName("t_"+t.Name()), false)
	return newFleetOf(t, &testkit.DB{SQL: s.SQL, URL: s.URL, Schema: s.Name})
}

func newFleetOf(t *testing.T, base *testkit.DB) *fleet {
	t.Helper()
	f := &fleet{base: base, prefix: testkit.SchemaName("g"), tables: map[string]*testkit.Schema{}}
	u, err := url.Parse(base.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", f.prefix)
	u.RawQuery = q.Encode()
	if f.db, err = sql.Open("pgx", u.String()); err != nil {
		t.Fatal(err)
	}
	f.db.SetMaxIdleConns(20)
	t.Cleanup(func() { f.db.Close() })
	return f
}

// add creates schema prefix_name with the outbox migrated (or without any
// table), dropped when the test ends.
func (f *fleet) add(t *testing.T, name string, migrate bool) *testkit.Schema {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := testkit.CreateSchema(ctx, f.base.URL, f.prefix+"_"+name, migrate)
	if err != nil {
		t.Fatal(err)
	}
	f.tables[name] = s
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = s.SQL.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+ident.Quote(s.Name)+" CASCADE")
		s.SQL.Close()
	})
	return s
}

// write commits n events of each aggregate of aggs to table name's
// outbox, interleaved, with the schema as their topic and their sequence
// number as the payload; it returns when the commit returned.
func (f *fleet) write(t *testing.T, name string, from, n int, aggs ...string) time.Time {
	t.Helper()
	s := f.tables[name]
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: s.Table()})
	if err != nil {
		t.Fatal(err)
	}
	var events []txoutbox.Event
	for i := from; i < from+n; i++ {
		for _, agg := range aggs {
			e, err := txoutbox.NewEvent(s.Name, "order", agg, "order.changed", i)
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, e)
		}
	}
	tx, err := s.SQL.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // committed below
	if err := w.Write(context.Background(), tx, events...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

func (f *fleet) count(t *testing.T, name, where string) int {
	t.Helper()
	var n int
	s := f.tables[name]
	if err := s.SQL.QueryRow(`SELECT count(*) FROM ` + ident.Quote(s.Name) + `.outbox WHERE ` + where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// listenBackends counts the group's connections whose last statement was
// a LISTEN: those in LISTEN.
func (f *fleet) listenBackends(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.base.SQL.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`,
		f.prefix).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// groupConfig is a group over the fleet's schemas with fast rounds; with
// listen, the relays never poll (PollInterval an hour), so rows written
// after they started are published only if their NOTIFY reaches them.
func (f *fleet) groupConfig(listen bool) GroupConfig {
	cfg := GroupConfig{
		Relay: Config{ID: "g1", Logger: slog.New(slog.DiscardHandler),
			PollInterval: 10 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, StaleAfter: 10 * time.Second,
			LeaseDuration: 15 * time.Second, BackoffMin: 2 * time.Millisecond, BackoffMax: 20 * time.Millisecond},
		SchemaPattern:    f.prefix + "_*",
		DiscoverInterval: 100 * time.Millisecond,
	}
	if listen {
		cfg.Relay.PollInterval = time.Hour
	}
	return cfg
}

func (f *fleet) newGroup(t *testing.T, pub message.Publisher, cfg GroupConfig) *Group {
	t.Helper()
	g, err := NewGroup(f.db, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// tracedGroup is newGroup on a pool of its own whose statements are
// recorded, for a test to wait for what the group ran.
func (f *fleet) tracedGroup(t *testing.T, pub message.Publisher, cfg GroupConfig) (*Group, *testkit.Statements) {
	t.Helper()
	db, st := f.base.Traced(t)
	db.SetMaxIdleConns(20)
	g, err := NewGroup(db, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, st
}

// waitClaimsSettled waits until the claims that follow the group's last
// LISTEN are over for the tables of names: each table claimed after it,
// and none for a hot-poll window since. A row written then is found only
// through a NOTIFY or the next PollInterval.
func (f *fleet) waitClaimsSettled(t *testing.T, st *testkit.Statements, names ...string) {
	t.Helper()
	var claims, listens []string
	for _, n := range names {
		ns, err := outboxsql.NamesFor(f.tables[n].Name, "")
		if err != nil {
			t.Fatal(err)
		}
		claims = append(claims, ns.Render(outboxsql.Claim))
		listens = append(listens, "LISTEN "+pgx.Identifier{f.tables[n].Table().Channel()}.Sanitize())
	}
	// Each table's claim follows its own channel's LISTEN, which wakes
	// it; the group's other LISTENs (the unqualified channel's, in any
	// order among them) wake nobody, so they are only waited out.
	testkit.WaitFor(t, 15*time.Second, "the claims that follow LISTEN over", func() bool {
		quiet := time.Now().Add(-hotPollWindow - 200*time.Millisecond)
		if len(st.Matching("LISTEN ", time.Time{})) == 0 || len(st.Matching("LISTEN ", quiet)) > 0 {
			return false
		}
		for i, claim := range claims {
			own := st.Matching(listens[i], time.Time{})
			if len(own) == 0 || len(st.Matching(claim, own[len(own)-1].End)) == 0 || len(st.Matching(claim, quiet)) > 0 {
				return false
			}
		}
		return true
	})
}

// waitServing waits until the group serves exactly the tables of names,
// each relay heartbeating and claiming from its shards.
func (f *fleet) waitServing(t *testing.T, g *Group, names ...string) {
	t.Helper()
	var want []string
	for _, n := range names {
		want = append(want, f.prefix+"_"+n)
	}
	slices.Sort(want)
	var got []string
	if !testkit.Eventually(15*time.Second, func() bool {
		got = got[:0]
		ready := true
		for _, h := range g.Health() {
			got = append(got, h.Table.Schema)
			ready = ready && h.Running && h.Heartbeating && h.Shards == numShards
		}
		return ready && slices.Equal(got, want)
	}) {
		t.Fatalf("group serves %v (or not all ready), want %v ready", got, want)
	}
}

// groupPublisher records, per topic (a table's schema) and aggregate, the
// sequence numbers it acknowledged, and when each event was; with slots,
// at most that many publishes run at once, each taking delay, like a
// broker of bounded throughput every table shares.
type groupPublisher struct {
	sem   chan struct{} // nil: unbounded
	delay time.Duration

	mu    sync.Mutex
	acked map[string][]int     // topic/aggregate → sequence numbers
	at    map[string]time.Time // topic/payload → first acknowledgement
}

func newGroupPublisher(slots int, delay time.Duration) *groupPublisher {
	p := &groupPublisher{delay: delay, acked: map[string][]int{}, at: map[string]time.Time{}}
	if slots > 0 {
		p.sem = make(chan struct{}, slots)
	}
	return p
}

func (p *groupPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.sem != nil {
		p.sem <- struct{}{}
		time.Sleep(p.delay) // about time: a broker of bounded throughput
		<-p.sem
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		var seq int
		if _, err := fmt.Sscan(string(m.Payload), &seq); err != nil {
			return err
		}
		key := topic + "/" + m.Metadata.Get(txoutbox.HeaderAggregateID)
		p.acked[key] = append(p.acked[key], seq)
		if _, ok := p.at[topic+"/"+string(m.Payload)]; !ok {
			p.at[topic+"/"+string(m.Payload)] = now
		}
	}
	return nil
}

func (*groupPublisher) Close() error { return nil }

// checkOrder fails unless each of topic's aggregates got 0..n-1 first
// delivered in order (a redelivery may repeat an earlier one).
func (p *groupPublisher) checkOrder(t *testing.T, topic string, n int, aggs ...string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, agg := range aggs {
		key := topic + "/" + agg
		next := 0
		for _, seq := range p.acked[key] {
			switch {
			case seq == next:
				next++
			case seq > next:
				t.Fatalf("%s: event %d delivered before %d (deliveries %v)", key, seq, next, p.acked[key])
			}
		}
		if next != n {
			t.Fatalf("%s: %d of %d events delivered (deliveries %v)", key, next, n, p.acked[key])
		}
	}
}

func TestGroupConfigErrors(t *testing.T) {
	// A pool that never connects: NewGroup reads its driver's type only.
	db, pub := sql.OpenDB(stubConnector{}), nopPublisher{}
	for name, cfg := range map[string]GroupConfig{
		"neither schemas nor pattern":   {},
		"both schemas and pattern":      {Schemas: []string{"a"}, SchemaPattern: "tenant_*"},
		"bad pattern":                   {SchemaPattern: "tenant_["},
		"schema PostgreSQL cannot hold": {Schemas: []string{strings.Repeat("a", 64)}},
		"schema listed twice":           {Schemas: []string{"a", "b", "a"}},
		"relay table has a schema":      {Relay: Config{Table: txoutbox.Table{Schema: "public"}}, SchemaPattern: "*"},
		"relay table name bad":          {Relay: Config{Table: txoutbox.Table{Name: "x-y"}}, SchemaPattern: "*"},
		"bad relay config":              {Relay: Config{BatchSize: -1}, SchemaPattern: "*"},
		"negative discover interval":    {SchemaPattern: "*", DiscoverInterval: -time.Second},
		"negative claim conns":          {SchemaPattern: "*", ClaimConns: -1},
	} {
		if _, err := NewGroup(db, pub, cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: NewGroup: %v, want ErrInvalidConfig", name, err)
		}
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate: %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := NewGroup(nil, pub, GroupConfig{SchemaPattern: "*"}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil db: %v", err)
	}
	if _, err := NewGroup(db, nil, GroupConfig{SchemaPattern: "*"}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil publisher: %v", err)
	}
	g, err := NewGroup(db, pub, GroupConfig{Schemas: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if g.cfg.DiscoverInterval != DiscoverIntervalDefault || g.ID() == "" {
		t.Errorf("defaults: DiscoverInterval %s, ID %q", g.cfg.DiscoverInterval, g.ID())
	}
}

// A pool bounded below MinOpenConns would let LISTEN hold the only
// connections and publish nothing: NewGroup and New refuse it; at the
// floor a group publishes.
func TestGroupAndRelayRefuseAPoolBelowMinOpenConns(t *testing.T) {
	f := newFleet(t)
	f.add(t, "a", true)
	pub := newGroupPublisher(0, 0)
	cfg := f.groupConfig(false)
	for _, c := range []struct {
		max      int
		noListen bool
		ok       bool
	}{{1, false, false}, {MinOpenConns - 1, false, false}, {MinOpenConns - 2, true, false}, {MinOpenConns - 1, true, true}, {MinOpenConns, false, true}} {
		f.db.SetMaxOpenConns(c.max)
		gcfg := cfg
		gcfg.Relay.DisableListen = c.noListen
		_, gerr := NewGroup(f.db, pub, gcfg)
		rcfg := cfg.Relay
		rcfg.DisableListen = c.noListen
		rcfg.Table = f.tables["a"].Table()
		_, rerr := New(f.db, pub, rcfg)
		for what, err := range map[string]error{"NewGroup": gerr, "New": rerr} {
			if c.ok && err != nil {
				t.Errorf("%s, pool of %d, DisableListen %v: %v", what, c.max, c.noListen, err)
			}
			if !c.ok && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "SetMaxOpenConns")) {
				t.Errorf("%s, pool of %d, DisableListen %v: %v, want ErrInvalidConfig naming SetMaxOpenConns", what, c.max, c.noListen, err)
			}
		}
	}
	f.db.SetMaxOpenConns(MinOpenConns)
	g := f.newGroup(t, pub, cfg)
	testkit.Run(t, g.Run)
	f.write(t, "a", 0, 1, "k")
	testkit.WaitFor(t, 10*time.Second, "a row published through a pool of MinOpenConns", func() bool { return f.count(t, "a", "state = 'published'") == 1 })
}

// The claim connections a group keeps leave a bounded pool the rest a
// relay needs: the default is lowered to fit, a ClaimConns that does not
// fit is refused at NewGroup, naming the pool's bound.
func TestGroupClaimConnsFitThePool(t *testing.T) {
	f := newFleet(t)
	pub := newGroupPublisher(0, 0)
	for _, c := range []struct {
		max, claimConns int
		noListen        bool
		want            int // 0: refused
	}{
		{0, 0, false, ClaimConnsDefault}, {0, 9, false, 9},
		{40, 0, false, ClaimConnsDefault}, {9, 0, false, 2}, {5, 0, false, 1}, {MinOpenConns, 0, false, 1}, {MinOpenConns - 1, 0, true, 1},
		{5, 2, false, 2}, {5, 3, false, 0}, {5, 3, true, 3}, {5, 4, true, 0},
	} {
		f.db.SetMaxOpenConns(c.max)
		cfg := f.groupConfig(false)
		cfg.ClaimConns, cfg.Relay.DisableListen = c.claimConns, c.noListen
		g, err := NewGroup(f.db, pub, cfg)
		switch {
		case c.want == 0 && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "SetMaxOpenConns")):
			t.Errorf("pool of %d, ClaimConns %d, DisableListen %v: %v, want ErrInvalidConfig naming SetMaxOpenConns", c.max, c.claimConns, c.noListen, err)
		case c.want != 0 && err != nil:
			t.Errorf("pool of %d, ClaimConns %d, DisableListen %v: %v", c.max, c.claimConns, c.noListen, err)
		case c.want != 0 && (g.cfg.ClaimConns != c.want || cap(g.conns.slots) != c.want):
			t.Errorf("pool of %d, ClaimConns %d, DisableListen %v: %d claim connections, want %d", c.max, c.claimConns, c.noListen, g.cfg.ClaimConns, c.want)
		}
	}
}

// Every table's claims take turns on the group's claim connections: six
// tables are claimed from on one, each published in order, and the
// connection goes back to the pool when the group stops.
func TestGroupClaimsTakeTurnsOnItsClaimConns(t *testing.T) {
	f := newFleet(t)
	names := []string{"a", "b", "c", "d", "e", "f"}
	tables := map[string]*testkit.Schema{}
	for _, n := range names {
		tables[n] = f.add(t, n, true)
		f.write(t, n, 0, 10, "k", "m")
	}
	pub := newGroupPublisher(0, 0)
	cfg := f.groupConfig(true)
	cfg.ClaimConns = 1
	g := f.newGroup(t, pub, cfg)
	stop := testkit.Run(t, g.Run)
	f.waitServing(t, g, names...)
	for _, n := range names {
		f.write(t, n, 10, 10, "k", "m")
	}
	testkit.WaitFor(t, 20*time.Second, "every table's rows published", func() bool {
		for _, n := range names {
			if f.count(t, n, "state = 'published'") != 40 {
				return false
			}
		}
		return true
	})
	for _, n := range names {
		pub.checkOrder(t, tables[n].Name, 20, "k", "m")
	}
	if made := g.conns.made.Load(); made != 1 {
		t.Errorf("the claims took %d connections from the pool, want 1", made)
	}
	// The connection holds each table's claim, and one claim settings
	// statement for all of them (the gate's table is a parameter). It came
	// from the pool, and may hold statements the pool ran on it before.
	cc := keptConn(t, g)
	var settings, claims int
	err := cc.conn.QueryRowContext(context.Background(), `SELECT count(*) FILTER (WHERE statement LIKE '%hashtext(''txoutbox.claim'')%'),
		count(*) FILTER (WHERE statement LIKE '%took AS MATERIALIZED%')
		FROM pg_prepared_statements WHERE statement NOT LIKE '%pg_prepared_statements%'`).Scan(&settings, &claims)
	g.conns.put(cc, false)
	if err != nil {
		t.Fatal(err)
	}
	if settings != 1 || claims != len(names) {
		t.Errorf("the claim connection prepared %d claim settings statements and %d claims, want 1 and %d", settings, claims, len(names))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := len(g.conns.slots); n != 0 {
		t.Errorf("%d claim connections kept after the group stopped", n)
	}
	if inUse := f.db.Stats().InUse; inUse != 0 {
		t.Errorf("%d connections of the pool in use after the group stopped", inUse)
	}
}

// keptConn borrows one of g's kept claim connections (not a pool
// connection lent while the kept ones are busy); the caller gives it back.
func keptConn(t *testing.T, g *Group) claimConn {
	t.Helper()
	cc, err := g.conns.get(context.Background())
	for err == nil && cc.pooled { // the kept one busy with a claim
		g.conns.put(cc, false)
		cc, err = g.conns.get(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

// A claim connection whose backend is gone (PostgreSQL restarted, the
// backend terminated) fails one claim, is closed and replaced: the rows
// are published on the new one.
func TestGroupReplacesABrokenClaimConn(t *testing.T) {
	f := newFleet(t)
	f.add(t, "a", true)
	pub := newGroupPublisher(0, 0)
	cfg := f.groupConfig(true)
	cfg.ClaimConns = 1
	g := f.newGroup(t, pub, cfg)
	testkit.Run(t, g.Run)
	f.waitServing(t, g, "a")
	f.write(t, "a", 0, 5, "k")
	testkit.WaitFor(t, 10*time.Second, "the first rows published", func() bool { return f.count(t, "a", "state = 'published'") == 5 })
	cc := keptConn(t, g)
	var pid int
	if err := cc.conn.QueryRowContext(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	g.conns.put(cc, false)
	if _, err := f.base.SQL.Exec(`SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	f.write(t, "a", 5, 5, "k")
	testkit.WaitFor(t, 10*time.Second, "the rows written after the claim connection's backend was terminated published",
		func() bool { return f.count(t, "a", "state = 'published'") == 10 })
	if made := g.conns.made.Load(); made != 2 {
		t.Errorf("%d claim connections opened, want 2: the broken one replaced once", made)
	}
}

// A claim waits for a claim connection as it would for the pool's, under
// its context; one whose claim left it broken is closed and its place
// is taken by a new one.
func TestClaimConnsLendUpToTheirNumber(t *testing.T) {
	db := testkit.NewDB(t).SQL
	c := newClaimConns(db, 2, time.Second)
	ctx := context.Background()
	a, err := c.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.get(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third get with two lent: %v, want the context's deadline", err)
	}
	got := make(chan claimConn, 1)
	go func() {
		cc, err := c.get(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- cc
	}()
	c.put(a, false)
	if cc := <-got; cc.conn != a.conn {
		t.Errorf("the waiting get was lent another connection than the one given back")
	}
	c.put(b, true) // its claim left it broken: closed
	d, err := c.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if made := c.made.Load(); made != 3 {
		t.Errorf("after a broken one: %d made, want 3 (a new one in its place)", made)
	}

	// Both lent: after the wait, the pool's.
	c.wait = 20 * time.Millisecond
	p, err := c.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !p.pooled || c.borrowed.Load() != 1 || c.made.Load() != 3 {
		t.Errorf("with all lent: pooled %v, %d borrowed, %d made; want the pool's (1 borrowed, 3 made)", p.pooled, c.borrowed.Load(), c.made.Load())
	}
	c.put(p, false)

	// One past its age is closed on its return, and a new one opened.
	c.maxAge = time.Millisecond
	d.made = d.made.Add(-2 * c.maxAge)
	pidOf := func(cc claimConn) (pid int) {
		t.Helper()
		if err := cc.conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	old := pidOf(d)
	c.put(d, false)
	e, err := c.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.made.Load() != 4 || pidOf(e) == old {
		t.Errorf("after one aged out: %d made, backend %d again: want a new connection (4 made) on a new backend", c.made.Load(), old)
	}
	c.maxAge = time.Hour
	c.put(e, false)
	c.put(a, false)
	c.close()
	if n := len(c.slots); n != 0 {
		t.Errorf("%d claim connections kept after close", n)
	}
	if inUse := db.Stats().InUse; inUse != 0 {
		t.Errorf("%d connections of the pool still in use after close", inUse)
	}
}

// Two tables with the same aggregates are each published in order, as a
// relay of their own would; a table that appears while the group runs is
// served without a restart, once migrated, its rows found by NOTIFY.
func TestGroupServesEachTableInOrderAndFindsNewOnes(t *testing.T) {
	f := newFleet(t)
	a, b := f.add(t, "a", true), f.add(t, "b", true)
	f.write(t, "a", 0, 20, "k", "m")
	f.write(t, "b", 0, 20, "k", "m")
	bare := f.add(t, "d", false) // selected, but no outbox table
	if _, err := bare.SQL.Exec(`CREATE TABLE outbox (id bigint)`); err != nil {
		t.Fatal(err)
	}
	pub := newGroupPublisher(0, 0)
	g := f.newGroup(t, pub, f.groupConfig(true))
	stop := testkit.Run(t, g.Run)
	f.waitServing(t, g, "a", "b")
	testkit.WaitFor(t, 15*time.Second, "both tables published", func() bool {
		return f.count(t, "a", "state = 'published'") == 40 && f.count(t, "b", "state = 'published'") == 40
	})
	pub.checkOrder(t, a.Name, 20, "k", "m")
	pub.checkOrder(t, b.Name, 20, "k", "m")

	// A new tenant, while running: served once discovered, and rows
	// written afterwards reach it through the shared LISTEN.
	c := f.add(t, "c", true)
	f.waitServing(t, g, "a", "b", "c")
	f.write(t, "c", 0, 5, "k")
	f.write(t, "a", 20, 5, "k")
	testkit.WaitFor(t, 15*time.Second, "the new table's and the old one's new rows published", func() bool {
		return f.count(t, "c", "state = 'published'") == 5 && f.count(t, "a", "state = 'published'") == 45
	})
	pub.checkOrder(t, c.Name, 5, "k")

	// The unmigrated one is left alone until migrated.
	if _, err := bare.SQL.Exec(`DROP TABLE outbox`); err != nil {
		t.Fatal(err)
	}
	m, err := migrations.New(bare.SQL, migrations.Config{Table: bare.Table()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.waitServing(t, g, "a", "b", "c", "d")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A table whose schema is dropped has its relay stopped; the others go
// on.
func TestGroupLetsADroppedTableGo(t *testing.T) {
	f := newFleet(t)
	f.add(t, "a", true)
	b := f.add(t, "b", true)
	g := f.newGroup(t, newGroupPublisher(0, 0), f.groupConfig(false))
	testkit.Run(t, g.Run)
	f.waitServing(t, g, "a", "b")
	g.mu.Lock()
	rb := g.children[b.Name].relay
	g.mu.Unlock()
	// The drop locks the schema's tables one by one while the relay's
	// statements lock some of the same tables in their own order: either
	// may be the victim of a deadlock, and a DBA runs the drop again.
	for attempt := 1; ; attempt++ {
		_, err := f.base.SQL.Exec(`DROP SCHEMA ` + ident.Quote(b.Name) + ` CASCADE`)
		var pgErr *pgconn.PgError
		if err == nil {
			break
		} else if !errors.As(err, &pgErr) || pgErr.Code != "40P01" || attempt == 5 {
			t.Fatal(err)
		}
	}
	f.waitServing(t, g, "a")
	testkit.WaitFor(t, 15*time.Second, "the dropped table's relay stopped", func() bool { return !rb.Health().Running })
	f.write(t, "a", 0, 3, "k")
	testkit.WaitFor(t, 15*time.Second, "the other table published", func() bool { return f.count(t, "a", "state = 'published'") == 3 })
}

// However many tables, the group holds one connection in LISTEN, and
// every table's notifications reach its relay (which never polls here).
// Run stops every relay cleanly: they unregister, and the LISTEN
// connection is closed.
func TestGroupListensOnOneConnection(t *testing.T) {
	f := newFleet(t)
	names := []string{"a", "b", "c", "d"}
	for _, n := range names {
		f.add(t, n, true)
	}
	g := f.newGroup(t, newGroupPublisher(0, 0), f.groupConfig(true))
	stop := testkit.Run(t, g.Run)
	f.waitServing(t, g, names...)
	if err := g.Run(context.Background()); !errors.Is(err, ErrAlreadyRunning) {
		t.Errorf("second Run: %v, want ErrAlreadyRunning", err)
	}
	for _, n := range names {
		f.write(t, n, 0, 2, "k")
	}
	testkit.WaitFor(t, 15*time.Second, "every table's rows published through NOTIFY", func() bool {
		for _, n := range names {
			if f.count(t, n, "state = 'published'") != 2 {
				return false
			}
		}
		return true
	})
	if n := f.listenBackends(t); n != 1 {
		t.Errorf("%d connections in LISTEN for %d tables, want 1", n, len(names))
	}

	// The connection lost: the group listens again on every channel.
	var pid int
	if err := f.base.SQL.QueryRow(`SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, f.prefix).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := f.base.SQL.Exec(`SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 15*time.Second, "a new LISTEN connection", func() bool {
		var n int
		if err := f.base.SQL.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%' AND pid <> $2`,
			f.prefix, pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	// Rows committed before a channel's LISTEN took effect are found by
	// the wake-up that follows it, those after by their NOTIFY.
	for _, n := range names {
		f.write(t, n, 2, 2, "k")
	}
	testkit.WaitFor(t, 15*time.Second, "every table's rows published through NOTIFY after the reconnect", func() bool {
		for _, n := range names {
			if f.count(t, n, "state = 'published'") != 4 {
				return false
			}
		}
		return true
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, h := range g.Health() {
		t.Errorf("still served after Run returned: %v", h.Table)
	}
	for _, n := range names {
		s := f.tables[n]
		var relays int
		if err := s.SQL.QueryRow(`SELECT count(*) FROM outbox_relays`).Scan(&relays); err != nil {
			t.Fatal(err)
		}
		if relays != 0 {
			t.Errorf("%s: %d relays registered after Run returned, want 0", n, relays)
		}
	}
	testkit.WaitFor(t, 5*time.Second, "the LISTEN connection closed", func() bool { return f.listenBackends(t) == 0 })
}

// A writer whose table has no schema (WriterConfig's default, writing
// through the connection's search_path) announces its rows on the
// unqualified channel, txoutbox.outbox: the group listens on it too and
// wakes every table's relay, so the row is published promptly although
// the relays never poll.
func TestGroupPublishesRowsOfAWriterWithoutSchemaThroughNotify(t *testing.T) {
	f := newFleetApart(t)
	a := f.add(t, "a", true)
	f.add(t, "b", true)
	g, st := f.tracedGroup(t, newGroupPublisher(0, 0), f.groupConfig(true)) // PollInterval 1h: NOTIFY only
	testkit.Run(t, g.Run)
	f.waitServing(t, g, "a", "b")
	f.waitClaimsSettled(t, st, "a", "b")

	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{}) // Table{}: a's table through a.SQL's search_path
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		e, err := txoutbox.NewEvent(a.Name, "order", "k", "order.changed", i)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := a.SQL.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(context.Background(), tx, e); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 5*time.Second, fmt.Sprintf("row %d written without a schema published through the unqualified channel %q", i, txoutbox.Table{}.Channel()),
			func() bool { return f.count(t, "a", "state = 'published'") == i+1 })
	}
	// A rebalance announced there (by a relay of an unqualified table)
	// makes every table's relay rebalance, and breaks nothing.
	if _, err := f.base.SQL.Exec(`SELECT pg_notify($1, $2)`, txoutbox.Table{}.Channel(), outboxsql.RebalancePayload); err != nil {
		t.Fatal(err)
	}
	f.write(t, "b", 0, 1, "k")
	testkit.WaitFor(t, 5*time.Second, "b's row published through its own channel", func() bool { return f.count(t, "b", "state = 'published'") == 1 })
	for _, h := range g.Health() {
		if !h.Running || !h.Heartbeating {
			t.Errorf("%v: %+v", h.Table, h.Health)
		}
	}
}

// logRecorder is a slog.Handler keeping the level and message of every
// record, for tests of what is logged and how often.
type logRecorder struct {
	mu   *sync.Mutex
	recs *[]slog.Record
}

func newLogRecorder() logRecorder { return logRecorder{mu: &sync.Mutex{}, recs: &[]slog.Record{}} }

func (logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.recs = append(*l.recs, r.Clone())
	return nil
}
func (l logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logRecorder) WithGroup(string) slog.Handler      { return l }

// count is how many records at level have a message containing msg.
func (l logRecorder) count(level slog.Level, msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range *l.recs {
		if r.Level == level && strings.Contains(r.Message, msg) {
			n++
		}
	}
	return n
}

// Every line a group's relay logs names its table once, as the relay of
// one table does: the group's attribute and the relay's own "table" made
// "relay starting" carry it twice.
func TestGroupRelayLogsNameTheTableOnce(t *testing.T) {
	f := newFleet(t)
	f.add(t, "a", true)
	logs := &testkit.SyncBuffer{}
	cfg := f.groupConfig(false)
	cfg.Relay.Logger = slog.New(slog.NewTextHandler(logs, nil))
	g := f.newGroup(t, newGroupPublisher(0, 0), cfg)
	testkit.Run(t, g.Run)
	f.waitServing(t, g, "a")
	testkit.WaitFor(t, 5*time.Second, "the relay's start and registration logged", func() bool {
		s := logs.String()
		return strings.Contains(s, `msg="relay starting"`) && strings.Contains(s, `msg="relay: registered"`)
	})
	want := "table=" + f.prefix + "_a.outbox"
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var tables []string
		for _, field := range strings.Fields(line) {
			if strings.HasPrefix(field, "table=") {
				tables = append(tables, field)
			}
		}
		relays := strings.Contains(line, `msg="relay starting"`) || strings.Contains(line, `msg="relay: registered"`)
		if len(tables) > 1 || relays && (len(tables) != 1 || tables[0] != want) {
			t.Errorf("a log line names the table as %q, want %s once: %s", tables, want, line)
		}
	}
}

// A table a WAL relay's slot streams is skipped as an unmigrated one is:
// out of Tables and Health, so the other tables' group stays ready, logged
// at Warn once however many discoveries find it still streamed, and
// served once the slot is gone.
func TestGroupSkipsAWALStreamedTableAndStaysReady(t *testing.T) {
	f := newFleet(t)
	f.add(t, "a", true)
	b := f.add(t, "b", true)
	slot := outboxsql.WALName(f.base.Database(), b.Name, "")
	if _, err := f.base.SQL.Exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		t.Fatal(err)
	}
	dropped := false
	dropSlot := func() {
		if !dropped {
			dropped = true
			if _, err := f.base.SQL.Exec(`SELECT pg_drop_replication_slot($1)`, slot); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(dropSlot)
	logs := newLogRecorder()
	cfg := f.groupConfig(false)
	cfg.Relay.Logger = slog.New(logs)
	g, st := f.tracedGroup(t, newGroupPublisher(0, 0), cfg)
	testkit.Run(t, g.Run)
	f.waitServing(t, g, "a")

	// Over 15 discoveries (every 100ms), the group is ready as /readyz
	// computes it, serving a alone.
	var samples, ready int
	from := time.Now()
	testkit.WaitFor(t, 30*time.Second, "15 discoveries", func() bool {
		hs := g.Health()
		ok := len(hs) == 1 && hs[0].Table.Schema == f.prefix+"_a"
		for _, h := range hs {
			ok = ok && h.Running && h.Heartbeating && !h.Stalled
		}
		samples++
		if ok {
			ready++
		}
		return len(st.Matching(outboxsql.Schemas, from)) >= 15
	})
	if ready != samples {
		t.Errorf("ready in %d of %d samples while b is WAL-streamed; health %+v", ready, samples, g.Health())
	}
	if n := logs.count(slog.LevelWarn, "not serving a selected schema's table"); n != 1 {
		t.Errorf("skip logged %d times at Warn, want once", n)
	}
	if n := logs.count(slog.LevelError, "relay stopped"); n != 0 {
		t.Errorf("a stopped relay logged %d times at Error, want none", n)
	}

	dropSlot()
	f.waitServing(t, g, "a", "b")
	f.write(t, "b", 0, 1, "k")
	testkit.WaitFor(t, 10*time.Second, "b's row published once the slot is gone", func() bool { return f.count(t, "b", "state = 'published'") == 1 })
}

// A table with a large backlog does not hold back the others: while it
// drains through a publisher of bounded throughput every table shares,
// the small tables' events are each acknowledged within a bound far below
// the big backlog's drain time.
func TestGroupKeepsSmallTablesFlowingBesideABigBacklog(t *testing.T) {
	const (
		backlog = 20_000
		slots   = 2
		delay   = time.Millisecond // the drain takes at least backlog × delay / slots = 10s
		bound   = 5 * time.Second
	)
	f := newFleet(t)
	f.add(t, "big", true)
	small := []string{"s1", "s2", "s3"}
	for _, n := range small {
		f.add(t, n, true)
	}
	for i := 0; i < backlog; i += 1000 {
		f.write(t, "big", i, 1000, "x")
	}
	pub := newGroupPublisher(slots, delay)
	cfg := f.groupConfig(true)
	cfg.Relay.PollInterval = time.Second
	g := f.newGroup(t, pub, cfg)
	testkit.Run(t, g.Run)
	testkit.WaitFor(t, 15*time.Second, "the big table draining", func() bool { return f.count(t, "big", "state = 'published'") > 0 })

	type written struct {
		table string
		seq   int
		at    time.Time
	}
	var events []written
	for i := range 20 {
		for _, n := range small {
			events = append(events, written{n, i, f.write(t, n, i, 1, "k")})
		}
		time.Sleep(50 * time.Millisecond) // about time: a trickle over a second of the drain
	}
	testkit.WaitFor(t, 30*time.Second, "every small table's events published", func() bool {
		for _, n := range small {
			if f.count(t, n, "state = 'published'") != 20 {
				return false
			}
		}
		return true
	})
	if left := f.count(t, "big", "state <> 'published'"); left == 0 {
		t.Fatalf("the big backlog drained before the small tables were done: the test proves nothing")
	}
	var worst time.Duration
	for _, e := range events {
		pub.mu.Lock()
		acked, ok := pub.at[fmt.Sprintf("%s/%d", f.tables[e.table].Name, e.seq)]
		pub.mu.Unlock()
		if !ok || acked.IsZero() {
			t.Fatalf("%s event %d: no acknowledgement recorded", e.table, e.seq)
		}
		worst = max(worst, acked.Sub(e.at))
	}
	t.Logf("worst commit-to-ack of the small tables: %s (%d rows of the big backlog left)", worst, f.count(t, "big", "state <> 'published'"))
	if worst > bound {
		t.Errorf("a small table's event waited %s from commit to acknowledgement, want under %s", worst, bound)
	}
	for _, n := range small {
		pub.checkOrder(t, f.tables[n].Name, 20, "k")
	}
}

// The hub adds and removes channels on its live connection: while other
// channels come and go constantly, every NOTIFY on a channel that stays
// still wakes its subscriber.
func TestGroupHubWakesEveryNotificationWhileChannelsChurn(t *testing.T) {
	f := newFleet(t)
	h := newHub(f.db, slog.New(slog.DiscardHandler), time.Second, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.run(ctx) }()
	defer func() { cancel(); <-done }()
	stable := subscriber{wake: make(chan struct{}, 1), rebalance: make(chan struct{}, 1)}
	h.add("txoutbox_test.stable", stable)
	select {
	case <-stable.wake:
	case <-time.After(5 * time.Second):
		t.Fatal("no initial wake")
	}
	stop := make(chan struct{})
	churnDone := make(chan struct{})
	go func() {
		defer close(churnDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ch := fmt.Sprintf("txoutbox_test.churn.%d", i%7)
			churned := subscriber{wake: make(chan struct{}, 1), rebalance: make(chan struct{}, 1)}
			h.add(ch, churned)
			select {
			case <-churned.wake: // the hub listens on it
			case <-stop:
				return
			}
			h.remove(ch)
		}
	}()
	missed := 0
	for i := 0; i < 200; i++ {
		// drain a stray wake first (catch-ups of stable never re-signal)
		select {
		case <-stable.wake:
		default:
		}
		if _, err := f.base.SQL.Exec(`SELECT pg_notify('txoutbox_test.stable', '')`); err != nil {
			t.Fatal(err)
		}
		select {
		case <-stable.wake:
		case <-time.After(2 * time.Second):
			missed++
		}
	}
	close(stop)
	<-churnDone
	if missed > 0 {
		t.Errorf("%d of 200 NOTIFYs lost under churn", missed)
	}
}

// A claim that waits on a lock past its time is ended by the server, not
// abandoned by the client: the claim connection stays open with its plans
// (serverTimeout), where an abandoned one would be closed and replaced.
func TestGroupKeepsItsClaimConnWhenAClaimTimesOut(t *testing.T) {
	f := newFleet(t)
	f.add(t, "a", true)
	pub := newGroupPublisher(0, 0)
	cfg := f.groupConfig(false)
	cfg.ClaimConns = 1
	// Long enough for the whole margin (serverTimeoutMargin): the
	// server's error has a second to reach a client slowed by -race on a
	// busy machine.
	cfg.Relay.StatementTimeout = 4 * time.Second
	logs := &testkit.SyncBuffer{}
	cfg.Relay.Logger = slog.New(slog.NewTextHandler(logs, nil))
	g := f.newGroup(t, pub, cfg)
	testkit.Run(t, g.Run)
	f.waitServing(t, g, "a")
	f.write(t, "a", 0, 5, "k")
	testkit.WaitFor(t, 10*time.Second, "the first rows published", func() bool { return f.count(t, "a", "state = 'published'") == 5 })

	// An operator holds the table's claim gate (as outbox replay does)
	// past a claim's timeout.
	names, err := outboxsql.NamesFor(f.prefix+"_a", txoutbox.TableNameDefault)
	if err != nil {
		t.Fatal(err)
	}
	op, err := f.base.SQL.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Rollback() //nolint:errcheck // after Commit below, a no-op
	if _, err := op.Exec(names.Render(outboxsql.OpsClaimGate)); err != nil {
		t.Fatal(err)
	}
	f.write(t, "a", 5, 5, "k")
	testkit.WaitFor(t, 3*cfg.Relay.StatementTimeout, "a claim to time out on the gate", func() bool {
		return strings.Contains(logs.String(), "canceling statement due to lock timeout")
	})
	if err := op.Commit(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the rows written while the gate was held published",
		func() bool { return f.count(t, "a", "state = 'published'") == 10 })
	if made := g.conns.made.Load(); made != 1 {
		t.Errorf("%d claim connections opened, want 1: claims that timed out on the gate closed the kept one", made)
	}
}

func TestServerTimeoutEndsBeforeTheContext(t *testing.T) {
	if got := serverTimeout(context.Background(), 10*time.Second); got != 10*time.Second {
		t.Errorf("no deadline: %s, want the limit", got)
	}
	for _, c := range []struct {
		left, limit, lo, hi time.Duration
	}{
		{time.Minute, 10 * time.Second, 10 * time.Second, 10 * time.Second},             // the limit
		{10 * time.Second, 10 * time.Second, 8500 * time.Millisecond, 9 * time.Second},  // a second short
		{time.Second, 10 * time.Second, 700 * time.Millisecond, 750 * time.Millisecond}, // a quarter short
		{-time.Second, 10 * time.Second, time.Millisecond, time.Millisecond},            // none left
	} {
		ctx, cancel := context.WithTimeout(context.Background(), c.left)
		got := serverTimeout(ctx, c.limit)
		cancel()
		if got < c.lo || got > c.hi {
			t.Errorf("%s left, limit %s: %s, want %s to %s", c.left, c.limit, got, c.lo, c.hi)
		}
	}
}

// TestGroupSpreadsItsTablesHeartbeats: the tables' relays start together,
// but their heartbeat rounds fall at different moments of the interval
// (spreadTicker), rather than all in one burst each interval. Read from the
// data: how long ago each table's relay row was last heartbeated.
func TestGroupSpreadsItsTablesHeartbeats(t *testing.T) {
	f := newFleet(t)
	const tables = 12
	var names []string
	for i := range tables {
		names = append(names, fmt.Sprintf("h%02d", i))
		f.add(t, names[i], true)
	}
	cfg := f.groupConfig(false)
	cfg.Relay.HeartbeatInterval = 4 * time.Second
	// Without LISTEN: a relay of an unqualified table, in another test on
	// this database, that announces a rebalance on the broadcast channel
	// makes every table of the group run a round at once, and their last
	// heartbeats line up until each one's next tick.
	cfg.Relay.DisableListen = true
	g := f.newGroup(t, newGroupPublisher(0, 0), cfg)
	testkit.Run(t, g.Run)
	f.waitServing(t, g, names...)
	time.Sleep(cfg.Relay.HeartbeatInterval + 500*time.Millisecond) // about time: every table past its first period, on its own tick
	var union []string
	for _, n := range names {
		names, err := outboxsql.NamesFor(f.tables[n].Name, "")
		if err != nil {
			t.Fatal(err)
		}
		union = append(union, "SELECT heartbeat_at FROM "+names.Relays)
	}
	// Aligned, the rounds are as far apart as the time they take to run
	// (0.3 s here under -race). Spread at random over 4 seconds, all 12
	// fall within 1.2 s of each other with a chance of 12 × 0.3^11, 2 in
	// 100,000.
	var spread float64
	if err := f.base.SQL.QueryRow(`SELECT extract(epoch FROM max(heartbeat_at) - min(heartbeat_at))::float8 FROM (` +
		strings.Join(union, " UNION ALL ") + `) h`).Scan(&spread); err != nil {
		t.Fatal(err)
	}
	if spread < 1.2 {
		t.Errorf("the %d tables' last heartbeats are %.3fs apart at most, want them spread over the 4s interval (at least 1.2s)", tables, spread)
	}
}

// stubConnector is a database/sql connector of a driver no dialect is
// known for, that never connects.
type stubConnector struct{}

func (stubConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("stub: no connections")
}

func (stubConnector) Driver() driver.Driver { return stubDriver{} }

type stubDriver struct{}

func (stubDriver) Open(string) (driver.Conn, error) { return nil, errors.New("stub: no connections") }
