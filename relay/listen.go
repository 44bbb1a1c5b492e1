package relay

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// listenLoop holds one connection in LISTEN on the table's channel and wakes
// the claimer on every notification. It reconnects with backoff when the
// connection drops; meanwhile the claimer polls.
func (r *Relay) listenLoop(ctx context.Context) {
	if r.cfg.DisableListen {
		return
	}
	failures := 0
	for ctx.Err() == nil {
		start := time.Now()
		err := r.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			failures = 0 // a connection that held a while: an isolated drop
		}
		if errors.Is(err, errNotPgx) {
			r.log.Warn("relay: LISTEN needs the pgx database/sql driver; polling instead", "poll_interval", r.cfg.PollInterval)
			return
		}
		failures++
		d := backoff(failures, 100*time.Millisecond, 10*time.Second)
		r.log.Warn("relay: listen connection lost; polling until it is back", "err", err, "retry_in", d)
		signal(r.wake) // rows may have arrived unannounced
		if !sleep(ctx, d) {
			return
		}
	}
}

var errNotPgx = errors.New("not a pgx connection")

func (r *Relay) listen(ctx context.Context) error {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("get connection: %w", err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		pc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return errNotPgx
		}
		c := pc.Conn()
		if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{r.cfg.Table.Channel()}.Sanitize()); err != nil {
			return fmt.Errorf("listen: %w: %w", err, driver.ErrBadConn)
		}
		signal(r.wake) // anything committed before LISTEN took effect
		for {
			n, err := c.WaitForNotification(ctx)
			if err != nil {
				// Never hand a LISTENing (or broken) connection back to
				// the pool: ErrBadConn makes database/sql discard it.
				return fmt.Errorf("wait for notification: %w: %w", err, driver.ErrBadConn)
			}
			if n.Payload == outboxsql.RebalancePayload {
				signal(r.members.rebalanceNow)
				continue
			}
			signal(r.wake)
		}
	})
}
