package walrelay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// inMsg is one message of the replication stream.
type inMsg struct {
	keepalive bool
	walEnd    uint64 // keepalive: what the server has sent up to
	reply     bool   // keepalive: the server asks for a status update now
	msg       pglogrepl.Message
}

// maxPart is the most events of a transaction handed to the lanes at once.
const maxPart = 256

// streamDeps is what a stream reads the slot with, hands its events to,
// and tells the session's other parts.
type streamDeps struct {
	repl    *pgconn.PgConn // the replication connection, streaming from the slot
	pool    *pgxpool.Pool
	sql     *statements
	log     *slog.Logger
	slot    string
	lanes   *lanes
	rows    *tableRows // looks up the rows a resumed stream brings again
	resume  resume
	decoder *decoder

	// confirmedTo is the position the stream has settled up to, for the
	// cleanup and the ceiling keeper; inflightNow the events read and not
	// yet confirmed. The stream writes both; ceiling it only reads (see
	// ceilingKeeper).
	confirmedTo *atomic.Uint64
	inflightNow *atomic.Int64
	ceiling     *atomic.Uint64

	maxInFlight                                int // Config.MaxInFlight
	flushInterval, pingInterval, senderTimeout time.Duration
}

// stream reads the slot until its context ends or the connection fails.
//
// The confirmed position, reported to the server as written, flushed and
// applied, only ever moves to the end of a transaction whose events, and
// every earlier transaction's, are settled (published or dead): a prefix in
// commit order. With nothing in flight and no transaction half read, it
// moves to the end of WAL the server says it has sent (a keepalive), so an
// idle outbox does not hold WAL back; never while anything is in flight.
type stream struct {
	streamDeps

	queue     []*txn // dispatched, not yet confirmed, in commit order
	open      *txn   // between Begin and Commit: the part not yet dispatched
	final     uint64 // the open transaction's commit position (Begin's FinalLSN)
	inflight  int    // events in queue
	confirmed uint64
	sent      uint64 // the position last reported to the server
	part      int    // the most events of an open transaction held back

	heard   atomic.Int64 // unix nanoseconds the reader last received, or was waiting on the loop
	blocked atomic.Bool  // the reader waits for the loop, not for the server
}

// newStream returns a stream from the slot's position confirmed.
func newStream(d streamDeps, confirmed uint64) *stream {
	s := &stream{streamDeps: d, confirmed: confirmed, sent: confirmed, part: max(1, min(maxPart, d.maxInFlight/2))}
	s.confirmedTo.Store(confirmed)
	return s
}

// run streams until ctx ends (then it drains: see drain) or the
// connection fails, with the session's cleanup and ceiling keeper beside
// it; it stops the lanes before it returns.
func (s *stream) run(ctx context.Context, cl *cleanup, ck *ceilingKeeper) error {
	rctx, stopReader := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	readErr := make(chan error, 1)
	s.heard.Store(time.Now().UnixNano())
	msgs := make(chan inMsg, 256)
	wg.Go(func() { readErr <- s.read(rctx, msgs) })
	wg.Go(func() { cl.run(rctx) })
	wg.Go(func() { ck.run(rctx) })
	defer func() {
		// Stopping the reader closes the connection (pgconn's reads end
		// with it), which frees the slot for a standby: the lanes end
		// their publishes first.
		s.lanes.stop()
		stopReader()
		wg.Wait()
	}()
	return s.loop(ctx, msgs, readErr, cl.failed)
}

// loop handles the reader's messages, the lanes' settlements and the
// flush and ping ticks.
func (s *stream) loop(ctx context.Context, msgs <-chan inMsg, readErr, failed <-chan error) error {
	flush := time.NewTicker(s.flushInterval)
	defer flush.Stop()
	ping := time.NewTicker(s.pingInterval)
	defer ping.Stop()
	for {
		in := msgs
		if s.inflight >= s.maxInFlight {
			in = nil // hold: the reader stops, the server waits; pings go on
		}
		var err error
		select {
		case <-ctx.Done():
			return s.drain(ctx)
		case err = <-readErr:
			return err
		case err = <-failed:
			return err
		case <-s.lanes.settled:
			s.advance()
		case <-flush.C:
			err = s.flush(ctx)
		case <-ping.C:
			err = s.ping(ctx)
		case m := <-in:
			err = s.receive(ctx, m)
		}
		if err != nil {
			return err
		}
	}
}

// dispatch hands t, a transaction or a part of one, to the lanes. The
// walsender (without pgoutput's streaming) sends a transaction only once
// it has committed, so a large one's events go out as they arrive, in
// parts, bounded by MaxInFlight like any others; only its last part
// carries its end, so the slot is confirmed past it once every part is
// settled.
func (s *stream) dispatch(ctx context.Context, t *txn, end uint64) error {
	if err := s.rows.skipSettled(ctx, t, end, s.resume); err != nil {
		return err
	}
	s.queue = append(s.queue, t)
	s.inflight += len(t.events)
	s.inflightNow.Store(int64(s.inflight))
	s.lanes.push(t)
	return nil
}

// add adds ev to the open transaction, and dispatches its events once
// they are a part.
func (s *stream) add(ctx context.Context, ev event) error {
	s.open.events = append(s.open.events, ev)
	if len(s.open.events) < s.part {
		return nil
	}
	t := s.open
	s.open = &txn{}
	return s.dispatch(ctx, t, s.final)
}

// advance confirms the settled transactions at the head of the queue.
func (s *stream) advance() {
	for len(s.queue) > 0 && s.queue[0].pending.Load() == 0 {
		s.confirmed = max(s.confirmed, s.queue[0].end)
		s.inflight -= len(s.queue[0].events)
		s.queue[0] = nil
		s.queue = s.queue[1:]
	}
	s.inflightNow.Store(int64(s.inflight))
	s.confirmedTo.Store(s.confirmed)
}

// reported is the position the server is told: it stops at the ceiling
// (see marker).
func (s *stream) reported() uint64 { return min(s.confirmed, s.ceiling.Load()) }

// send reports the position to the server, asking for a reply if reply.
func (s *stream) send(ctx context.Context, reply bool) error {
	_ = s.repl.Conn().SetWriteDeadline(time.Now().Add(s.senderTimeout / 2))
	pos := s.reported()
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.repl, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(pos), ReplyRequested: reply})
	if err != nil {
		return fmt.Errorf("send status update: %w", err)
	}
	s.sent = pos
	return nil
}

// flush reports the position if it advanced.
func (s *stream) flush(ctx context.Context) error {
	s.advance()
	if s.reported() > s.sent {
		return s.send(ctx, false)
	}
	return nil
}

// ping asks the server for a reply, after making sure the relay still
// holds the slot when the reader has heard nothing for SenderTimeout/2.
func (s *stream) ping(ctx context.Context) error {
	if time.Since(time.Unix(0, s.heard.Load())) > s.senderTimeout/2 {
		if !s.blocked.Load() {
			return fmt.Errorf("no message from the server for %s: giving up the slot before the server frees it for a standby", s.senderTimeout/2)
		}
		// Held at MaxInFlight the reader hears nothing: ask the server on
		// another connection whether this relay still holds the slot, or
		// stop publishing.
		if err := s.stillHolds(ctx); err != nil {
			return err
		}
	}
	s.advance()
	return s.send(ctx, true)
}

// receive handles one message of the reader.
func (s *stream) receive(ctx context.Context, m inMsg) error {
	if m.keepalive {
		if s.open == nil && len(s.queue) == 0 && m.walEnd > s.confirmed {
			s.confirmed = m.walEnd
			s.confirmedTo.Store(s.confirmed)
		}
		if m.reply {
			return s.send(ctx, false)
		}
		return nil
	}
	switch msg := m.msg.(type) {
	case *pglogrepl.RelationMessage:
		s.decoder.relation(msg)
	case *pglogrepl.BeginMessage:
		s.open, s.final = &txn{}, uint64(msg.FinalLSN)
	case *insertMessage:
		return s.insert(ctx, msg)
	case *pglogrepl.LogicalDecodingMessage:
		return s.message(ctx, msg)
	case *pglogrepl.CommitMessage:
		if s.open == nil {
			return fmt.Errorf("commit at %s without a begin", msg.CommitLSN)
		}
		s.open.end = uint64(msg.TransactionEndLSN)
		if err := s.dispatch(ctx, s.open, s.open.end); err != nil {
			return err
		}
		s.open = nil
	}
	return nil
}

// insert adds the event of an inserted row to the open transaction.
func (s *stream) insert(ctx context.Context, msg *insertMessage) error {
	ev, ok, err := s.decoder.insert(msg)
	var bad *rowError
	if errors.As(err, &bad) {
		// Marked dead by the lanes, as the loop must go on answering the
		// server meanwhile.
		ev, ok, err = event{row: bad.row, bad: bad}, true, nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errPermanent, err)
	}
	if ok && s.open != nil {
		return s.add(ctx, ev)
	}
	return nil
}

// message adds a table-less event to the open transaction.
func (s *stream) message(ctx context.Context, msg *pglogrepl.LogicalDecodingMessage) error {
	ev, ok, err := s.decoder.message(msg)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", errPermanent, err)
	case !ok:
		return nil
	case s.open == nil || !msg.Transactional:
		s.log.Warn("ignored a non-transactional event message; the writer emits transactional ones", "lsn", msg.LSN)
		return nil
	}
	return s.add(ctx, ev)
}

// stillHolds returns an error unless the stream's walsender holds the
// slot, within SenderTimeout/4.
func (s *stream) stillHolds(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.senderTimeout/4)
	defer cancel()
	var lsn string
	if err := s.pool.QueryRow(ctx, s.sql.ceiling, outboxsql.CeilingArgs{Slot: s.slot, PID: s.repl.PID()}.Args()...).Scan(&lsn); err != nil {
		return fmt.Errorf("giving up the slot: cannot tell it is still this relay's: %w", err)
	}
	return nil
}

// drain is the clean end of a stream: stop reading, let the events in
// flight settle for up to SenderTimeout/2, report the position reached.
func (s *stream) drain(ctx context.Context) error {
	limit := time.NewTimer(s.senderTimeout / 2)
	defer limit.Stop()
	for s.advance(); len(s.queue) > 0; s.advance() {
		select {
		case <-s.lanes.settled:
		case <-limit.C:
			s.log.Warn("stopping with events in flight; they are published again by the next relay", "transactions", len(s.queue))
			return s.send(ctx, false)
		}
	}
	return s.send(ctx, false)
}

// read receives the stream and hands its messages to the loop, in order.
func (s *stream) read(ctx context.Context, out chan<- inMsg) error {
	for {
		raw, err := s.repl.ReceiveMessage(ctx)
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		s.heard.Store(time.Now().UnixNano())
		m, ok, err := parseStreamMessage(raw)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		select {
		case out <- m:
		default:
			s.blocked.Store(true)
			select {
			case out <- m:
			case <-ctx.Done():
				return ctx.Err()
			}
			s.blocked.Store(false)
			s.heard.Store(time.Now().UnixNano())
		}
	}
}

// parseStreamMessage reads a message of the replication connection: ok
// is false for one the loop has no use for.
func parseStreamMessage(raw pgproto3.BackendMessage) (inMsg, bool, error) {
	switch raw := raw.(type) {
	case *pgproto3.ErrorResponse:
		return inMsg{}, false, fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(raw))
	case *pgproto3.CopyDone:
		return inMsg{}, false, errors.New("replication stream ended by the server")
	case *pgproto3.CopyData:
		if len(raw.Data) == 0 {
			return inMsg{}, false, nil
		}
		switch raw.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(raw.Data[1:])
			if err != nil {
				return inMsg{}, false, err
			}
			return inMsg{keepalive: true, walEnd: uint64(k.ServerWALEnd), reply: k.ReplyRequested}, true, nil
		case pglogrepl.XLogDataByteID:
			// The buffer is the connection's: copy before the next receive.
			x, err := pglogrepl.ParseXLogData(bytes.Clone(raw.Data[1:]))
			if err != nil {
				return inMsg{}, false, err
			}
			msg, err := parseMessage(x.WALData)
			if err != nil {
				return inMsg{}, false, fmt.Errorf("decode message at %s: %w", x.WALStart, err)
			}
			return inMsg{msg: msg}, true, nil
		}
	}
	return inMsg{}, false, nil
}
