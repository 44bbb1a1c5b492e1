package relay

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// hub is the listener of a Group: one connection in LISTEN on the channel
// of every table the group serves, handing each notification to that
// table's relay (its claimer's wake, or its membership's rebalance), so
// the connections LISTEN holds do not grow with the tables. Channels are
// added and removed on the live connection; after the connection drops it
// reconnects with backoff, listens on all of them again and wakes every
// relay, as a relay's own listener does.
//
// It listens on one more channel, broadcast: the unqualified channel of
// the tables' name (txoutbox.outbox), on which a writer whose table has no
// schema (it writes through its search_path) announces its rows. A
// notification there wakes every relay's claimer, since it cannot say
// which table's rows arrived; a rebalance there (announced by a relay of
// an unqualified table, never by the group's) makes every relay
// rebalance.
type hub struct {
	db        *sql.DB
	log       *slog.Logger
	poll      time.Duration // Config.PollInterval, for the log
	broadcast string        // the unqualified channel; "" for none

	mu   sync.Mutex
	subs map[string]subscriber // by channel; guarded by mu
	// dirty is set when subs changed since the connection last caught
	// up; interrupt cuts short the wait for a notification so it does.
	dirty     bool
	interrupt context.CancelFunc
}

// subscriber is where a table's notifications go.
type subscriber struct {
	wake      chan struct{} // the relay's claimer: rows may have arrived
	rebalance chan struct{} // the relay's membership: a peer joined or left
}

func newHub(db *sql.DB, log *slog.Logger, poll time.Duration, broadcast string) *hub {
	return &hub{db: db, log: log, poll: poll, broadcast: broadcast, subs: map[string]subscriber{}}
}

// add listens on channel for s. Rows committed before the LISTEN took
// effect are s's to find: s.wake is signalled once it has.
func (h *hub) add(channel string, s subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[channel] = s
	h.changed()
}

// remove stops listening on channel.
func (h *hub) remove(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, channel)
	h.changed()
}

// changed marks subs changed and interrupts the wait; mu is held.
func (h *hub) changed() {
	h.dirty = true
	if h.interrupt != nil {
		h.interrupt()
	}
}

// wakeAll signals every subscriber's claimer.
func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.subs {
		signal(s.wake)
	}
}

// run listens until ctx ends.
func (h *hub) run(ctx context.Context) {
	keepListening(ctx, h.log, h.poll, h.listen, h.wakeAll)
}

// listen holds one connection until it fails or ctx ends.
func (h *hub) listen(ctx context.Context) error {
	return onPgxConn(ctx, h.db, func(c *pgx.Conn) error {
		h.mu.Lock()
		h.dirty = true // a new connection listens on nothing yet
		h.mu.Unlock()
		listening := map[string]bool{}
		for {
			waitCtx, cancel := context.WithCancel(ctx)
			h.mu.Lock()
			dirty := h.dirty
			h.dirty = false
			if !dirty {
				h.interrupt = cancel
			}
			h.mu.Unlock()
			if dirty {
				cancel()
				if err := h.catchUp(ctx, c, listening); err != nil {
					// Never hand a LISTENing (or broken) connection back
					// to the pool: ErrBadConn makes database/sql discard it.
					return fmt.Errorf("listen: %w: %w", err, driver.ErrBadConn)
				}
				continue
			}
			n, err := c.WaitForNotification(waitCtx)
			h.mu.Lock()
			h.interrupt = nil
			h.mu.Unlock()
			interrupted := waitCtx.Err() != nil && ctx.Err() == nil
			cancel()
			if err != nil {
				if interrupted && !c.IsClosed() {
					continue // subs changed: catch up, then wait again
				}
				return fmt.Errorf("wait for notification: %w: %w", err, driver.ErrBadConn)
			}
			h.dispatch(n.Channel, n.Payload)
		}
	})
}

// catchUp makes the connection listen on the channels of subs, and only
// those, and wakes the subscribers it starts listening for.
func (h *hub) catchUp(ctx context.Context, c *pgx.Conn, listening map[string]bool) error {
	h.mu.Lock()
	want := make(map[string]subscriber, len(h.subs)+1)
	for ch, s := range h.subs {
		want[ch] = s
	}
	h.mu.Unlock()
	if h.broadcast != "" {
		// Its zero subscriber signals nobody when LISTEN takes effect:
		// each table's own channel catching up wakes its relay.
		want[h.broadcast] = subscriber{}
	}
	for ch := range listening {
		if _, ok := want[ch]; !ok {
			if _, err := c.Exec(ctx, "UNLISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
				return err
			}
			delete(listening, ch)
		}
	}
	for ch, s := range want {
		if listening[ch] {
			continue
		}
		if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
		listening[ch] = true
		signal(s.wake) // anything committed before LISTEN took effect
	}
	return nil
}

// dispatch hands a notification to its channel's subscriber, or to every
// subscriber on broadcast; one for a table the group just let go is
// dropped.
func (h *hub) dispatch(channel, payload string) {
	if h.broadcast != "" && channel == h.broadcast {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, s := range h.subs {
			if payload == outboxsql.RebalancePayload {
				signal(s.rebalance)
			} else {
				signal(s.wake)
			}
		}
		return
	}
	h.mu.Lock()
	s, ok := h.subs[channel]
	h.mu.Unlock()
	if !ok {
		return
	}
	if payload == outboxsql.RebalancePayload {
		signal(s.rebalance)
		return
	}
	signal(s.wake)
}
