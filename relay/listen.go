package relay

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// listener holds one connection in LISTEN on the table's channel and wakes
// the claimer on every notification, or the membership on a rebalance. It
// reconnects with backoff when the connection drops; meanwhile the claimer
// polls.
type listener struct {
	db        *sql.DB
	channel   string // Config.Table.Channel()
	log       *slog.Logger
	disabled  bool          // Config.DisableListen
	poll      time.Duration // Config.PollInterval, for the log
	wake      chan struct{} // the claimer's: rows may have arrived
	rebalance chan struct{} // the membership's rebalanceNow
}

// run listens until ctx ends.
func (l *listener) run(ctx context.Context) {
	if l.disabled {
		return
	}
	keepListening(ctx, l.log, l.poll, l.listen, func() { signal(l.wake) })
}

// keepListening runs listen until ctx ends, again with backoff each time
// it fails, calling lost after each failure: rows may have arrived
// unannounced. A driver other than pgx ends it; the relays then poll. It
// is the loop of a relay's listener and of a group's hub.
func keepListening(ctx context.Context, log *slog.Logger, poll time.Duration, listen func(context.Context) error, lost func()) {
	failures := 0
	for ctx.Err() == nil {
		start := time.Now()
		err := listen(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			failures = 0 // a connection that held a while: an isolated drop
		}
		if errors.Is(err, errNotPgx) {
			log.Warn("relay: LISTEN needs the pgx database/sql driver; polling instead", "poll_interval", poll)
			return
		}
		failures++
		d := backoff(failures, 100*time.Millisecond, 10*time.Second)
		log.Warn("relay: listen connection lost; polling until it is back", "err", err, "retry_in", d)
		lost()
		if !publish.Sleep(ctx, d) {
			return
		}
	}
}

var errNotPgx = errors.New("not a pgx connection")

// onPgxConn runs fn on a connection of db's own as a pgx connection
// (errNotPgx with another driver), and closes it after.
func onPgxConn(ctx context.Context, db *sql.DB, fn func(*pgx.Conn) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("get connection: %w", err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		pc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return errNotPgx
		}
		return fn(pc.Conn())
	})
}

func (l *listener) listen(ctx context.Context) error {
	return onPgxConn(ctx, l.db, func(c *pgx.Conn) error {
		if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
			return fmt.Errorf("listen: %w: %w", err, driver.ErrBadConn)
		}
		signal(l.wake) // anything committed before LISTEN took effect
		for {
			n, err := c.WaitForNotification(ctx)
			if err != nil {
				// Never hand a LISTENing (or broken) connection back to
				// the pool: ErrBadConn makes database/sql discard it.
				return fmt.Errorf("wait for notification: %w: %w", err, driver.ErrBadConn)
			}
			if n.Payload == outboxsql.RebalancePayload {
				signal(l.rebalance)
				continue
			}
			signal(l.wake)
		}
	})
}
