package relay

import (
	"context"
	"database/sql"
	"sync/atomic"
	"time"
)

// ClaimConnsDefault is GroupConfig.ClaimConns' default.
const ClaimConnsDefault = 4

// claimConnMaxAge is how long a claim connection is kept before it goes
// back to the pool for a fresh one, so the pool's own lifetime rules
// (db.SetConnMaxLifetime, a proxy's) are not dodged for good. Each swap
// costs each table claimed on it one plan of its claim.
const claimConnMaxAge = 5 * time.Minute

// claimConns lends the claims of a Group's tables a few connections it
// keeps out of the pool, so each table's claim is prepared and planned on
// those few only. The claim is a prepared statement per table (its text
// names the schema); a vacuum of a table invalidates its plan on every
// connection that holds it, and each plans it again at its next run (3–6
// ms, against 0.2 ms to run). Spread over a pool of 40 connections, a
// hundred tables each vacuumed and analysed once a minute cost thousands
// of plans a minute (docs/crash-suite.md, tenant-fairness).
//
// A claim waits for one of n connections as it would for the pool's,
// under its StatementTimeout. A connection is made when a claim needs one
// and none is free, up to n; one whose claim failed is given back to the
// pool (which drops it if it is broken), and so is one older than
// claimConnMaxAge.
type claimConns struct {
	db    *sql.DB
	free  chan claimConn // kept, idle
	slots chan struct{}  // one token per connection kept or lent
	made  atomic.Int64   // connections taken from the pool, for tests
}

type claimConn struct {
	conn *sql.Conn
	made time.Time
}

func newClaimConns(db *sql.DB, n int) *claimConns {
	return &claimConns{db: db, free: make(chan claimConn, n), slots: make(chan struct{}, n)}
}

// get lends a connection: a free one, a new one while fewer than n are
// kept, or the next one given back.
func (c *claimConns) get(ctx context.Context) (claimConn, error) {
	select {
	case cc := <-c.free:
		return cc, nil
	default:
	}
	select {
	case cc := <-c.free:
		return cc, nil
	case c.slots <- struct{}{}:
		conn, err := c.db.Conn(ctx)
		if err != nil {
			<-c.slots
			return claimConn{}, err
		}
		c.made.Add(1)
		return claimConn{conn: conn, made: time.Now()}, nil
	case <-ctx.Done():
		return claimConn{}, ctx.Err()
	}
}

// put takes a lent connection back; failed says its claim returned an
// error, after which its session is not trusted.
func (c *claimConns) put(cc claimConn, failed bool) {
	if failed || time.Since(cc.made) > claimConnMaxAge {
		cc.conn.Close()
		<-c.slots
		return
	}
	c.free <- cc
}

// close gives the free connections back to the pool. Connections lent
// at the time are given back as they return; none is lent once the
// relays have stopped.
func (c *claimConns) close() {
	for {
		select {
		case cc := <-c.free:
			cc.conn.Close()
			<-c.slots
		default:
			return
		}
	}
}
