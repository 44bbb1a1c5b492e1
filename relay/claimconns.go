package relay

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// ClaimConnsDefault is GroupConfig.ClaimConns' default.
const ClaimConnsDefault = 4

const (
	// claimConnWait is how long a claim waits for a claim connection
	// while none comes back before it takes one of the pool's. A claim
	// runs in milliseconds; when none of them is given back for this
	// long, all are held by claims waiting on locks (an operator's retry
	// or replay holding the claim gate, a tenant's migration), and the
	// other tables' claims go on beside them. Connections coming back
	// are a queue, waited out: claims on the pool's would plan the
	// claim again on each, which is what overloads the database then.
	claimConnWait = 500 * time.Millisecond
	// claimConnMaxAge is how long a claim connection is kept: then it is
	// closed and a new one opened, so the pool's own lifetime rules
	// (db.SetConnMaxLifetime, a proxy's) are not dodged for good. Each
	// new one costs each table claimed on it one plan of its claim.
	claimConnMaxAge = 5 * time.Minute
)

// claimConns lends the claims of a Group's tables a few connections it
// keeps out of the pool, so that each table's claim is prepared and
// planned on those few (see Group for why).
//
// A connection is opened when a claim needs one and none is free, up to
// n. A claim that waits claimConnWait while none of the n lent comes back
// takes one of the pool's instead; it waits under its StatementTimeout as
// before. A connection whose claim left it closed, busy or inside a
// transaction is closed, and so is one older than claimConnMaxAge (less a
// random part of a quarter of it, so they do not all go at once); a kept
// one is not pinged before it is lent,
// so after PostgreSQL restarts each fails one claim (which is retried)
// before it is replaced.
//
// A kept connection's session has the relays' lock timeout
// (Config.LockTimeout, outboxsql.SessionLockTimeout): pgx prepares the
// claim outside its transaction, and preparing it waits for the locks the
// claim takes. Never given back to the pool, it never carries the setting
// to another user of the pool.
type claimConns struct {
	db     *sql.DB
	free   chan claimConn // kept, idle
	slots  chan struct{}  // one token per connection kept or lent
	wait   time.Duration  // claimConnWait
	maxAge time.Duration  // claimConnMaxAge
	lock   []any          // outboxsql.SessionLockTimeout's arguments

	returned atomic.Int64 // connections given back, to tell a queue from claims stuck on locks
	made     atomic.Int64 // connections opened to be kept, for tests
	borrowed atomic.Int64 // claims that took the pool's, for tests
}

// claimConn is a connection lent to a claim: a kept one (made is when it
// was opened) or, pooled, one of the pool's for this claim only.
type claimConn struct {
	conn   *sql.Conn
	made   time.Time
	pooled bool
}

func newClaimConns(db *sql.DB, n int, lockTimeout time.Duration) *claimConns {
	return &claimConns{db: db, free: make(chan claimConn, n), slots: make(chan struct{}, n),
		wait: claimConnWait, maxAge: claimConnMaxAge, lock: outboxsql.TimeoutArgs{Timeout: lockTimeout}.Args()}
}

// get lends a connection: a free one, a new one while fewer than n are
// kept, the next one given back, or one of the pool's once none has been
// given back for c.wait.
func (c *claimConns) get(ctx context.Context) (claimConn, error) {
	select {
	case cc := <-c.free:
		return cc, nil
	default:
	}
	wait := time.NewTicker(c.wait)
	defer wait.Stop()
	seen := c.returned.Load()
	for {
		select {
		case cc := <-c.free:
			return cc, nil
		case c.slots <- struct{}{}:
			conn, err := c.db.Conn(ctx)
			if err == nil {
				if _, err = conn.ExecContext(ctx, outboxsql.SessionLockTimeout, c.lock...); err != nil {
					discard(conn)
				}
			}
			if err != nil {
				<-c.slots
				return claimConn{}, err
			}
			c.made.Add(1)
			jitter := time.Duration(rand.Int64N(int64(c.maxAge)/4 + 1))
			return claimConn{conn: conn, made: time.Now().Add(-jitter)}, nil
		case <-wait.C:
			if now := c.returned.Load(); now != seen {
				seen = now // a queue moving: wait on
				continue
			}
			conn, err := c.db.Conn(ctx)
			if err != nil {
				return claimConn{}, err
			}
			c.borrowed.Add(1)
			return claimConn{conn: conn, pooled: true}, nil
		case <-ctx.Done():
			return claimConn{}, ctx.Err()
		}
	}
}

// put takes a lent connection back; broken says its claim left it closed
// or inside a transaction (or, without pgx, that the claim failed).
func (c *claimConns) put(cc claimConn, broken bool) {
	if !cc.pooled {
		c.returned.Add(1)
	}
	switch {
	case broken:
		discard(cc.conn)
	case cc.pooled:
		cc.conn.Close()
		return
	case time.Since(cc.made) > c.maxAge:
		// Closed, not given back to the pool: database/sql lends the
		// connection freed last first, so it would come back as it was.
		discard(cc.conn)
	default:
		c.free <- cc
		return
	}
	if !cc.pooled {
		<-c.slots
	}
}

// discard closes a connection for good rather than give it back to the
// pool: database/sql closes one whose Raw returns driver.ErrBadConn.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	conn.Close()
}

// close closes the free connections. Connections lent at the time are
// kept when they return; none is lent once the relays have stopped.
func (c *claimConns) close() {
	for {
		select {
		case cc := <-c.free:
			discard(cc.conn)
			<-c.slots
		default:
			return
		}
	}
}
