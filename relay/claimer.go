package relay

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// After a NOTIFY, or a claim that found rows, the claimer polls again
// hotPollInterval later (or Config.ClaimCooldown, if longer), and as often
// while the polls find rows; once one finds nothing, it polls once more at
// the end of hotPollWindow (from the last claim that found rows) and then
// waits.
// Writers send at most one NOTIFY per txoutbox.WriterConfig.NotifyInterval
// (50ms by default), so rows committed just after a NOTIFY are found
// within tens of milliseconds instead of at the next PollInterval. A
// writer fast enough to leave rows unannounced keeps the polls finding
// rows, every hotPollInterval; one announcing every row (slower than one
// per NotifyInterval) costs two empty polls a NOTIFY. Polling at doubling
// intervals instead cost four, and a hundred tables written ten times a
// second each (tenant-fairness) spent most of the relay's statements on
// them.
const (
	hotPollInterval = 10 * time.Millisecond
	hotPollWindow   = 100 * time.Millisecond
)

// claimedRow is one claimed outbox row on its way through the relay.
type claimedRow struct {
	id       int64
	event    txoutbox.Event
	attempts int          // failed publishes before this claim
	seq      uint64       // the claim that took it
	inc      *incarnation // the incarnation that claimed it
	version  uint32       // the claimed version's xmin: the claim's transaction (see outboxsql.MarkPublished)
	bytes    int64        // its payload's size, counted in the budget
	// leaseEnds is when the lanes stop starting a publish of it, on the
	// relay's clock: the claim's start plus LeaseDuration less one
	// HeartbeatInterval, before the lease the database recorded ends and
	// any relay (this one too) may claim the row again (see lane.process).
	leaseEnds time.Duration
}

// claimer claims due rows and hands them to the lanes: the first step of
// every event's way through the relay. It alone runs the claim statement,
// numbers the claims (seq), and keeps the rows of a claim whose commit was
// not confirmed until they are released.
type claimer struct {
	claimerDeps

	// seq numbers claims; rows carry the number of the claim that took
	// them, which the lanes' fences compare against.
	seq atomic.Uint64
	// unconfirmed holds the rows of a claim whose commit failed: it may have
	// committed without the reply arriving, leaving them claimed by the
	// incarnation with no lane publishing them. The next claim first
	// releases them. Only the claimer's goroutine touches it.
	unconfirmed []*claimedRow
}

// claimerDeps is what the claimer reads and who it tells.
type claimerDeps struct {
	db *sql.DB
	// conns lends the claims their connections in a Group; nil: the
	// pool's (db).
	conns *claimConns
	sql   *statements
	cfg   Config
	log   *slog.Logger
	met   *metrics
	clock *clock // the relay's: the rows' leaseEnds
	// members gives the incarnation to claim under and its shards
	// (*membership).
	members interface {
		claimable() (*incarnation, []int16)
	}
	stalled func() bool // the relay cannot make progress: claim nothing (stall.stalled)
	budget  *budget
	outage  *outage
	wake    <-chan struct{} // signalled by NOTIFY and new shards: claim now
	// low is the claim's Low on a partitioned outbox (outboxsql.ClaimLow),
	// which the floor rounds keep; 0 reads every partition.
	low *atomic.Int64
	// claimed counts the rows claimed, for the floor rounds.
	claimed *atomic.Int64
	// lockout: no claim runs while the table is locked out.
	lockout *lockout
}

func newClaimer(d claimerDeps) *claimer { return &claimer{claimerDeps: d} }

// lastSeq is the number of the latest claim.
func (c *claimer) lastSeq() uint64 { return c.seq.Load() }

// reset starts a Run with no unconfirmed claim: rows a Run before left
// claimed are its incarnation's, to be taken over.
func (c *claimer) reset() { c.unconfirmed = nil }

// run claims due rows and hands them to lanes until ctx ends. It claims
// the next batch while earlier ones publish (bounded by MaxInFlight), and
// waits for a NOTIFY, the poll interval or free capacity otherwise.
func (c *claimer) run(ctx context.Context, lanes laneSet) {
	poll := time.NewTicker(c.cfg.PollInterval)
	defer poll.Stop()
	hotPoll := max(hotPollInterval, c.cfg.ClaimCooldown)
	var (
		more     = true // the last claim was full: claim again at once
		dbErrors int
		hotUntil time.Time // poll until then
		hotEvery = hotPoll
		hot      = time.NewTimer(time.Hour)
		// shortAt is when the last claim began, if it came back short:
		// the next waits for ClaimCooldown after it.
		shortAt time.Time
	)
	defer hot.Stop()
	for ctx.Err() == nil {
		if c.lockout.locked() {
			if !c.lockout.wait(ctx) {
				return
			}
			// Rows may have committed while it lasted, their NOTIFYs
			// spent on a claim that could not run.
			more = true
			continue
		}
		free, freeBytes := c.budget.free()
		if free < c.claimAt() || (freeBytes < roomFor(c.cfg.BatchBytes, c.cfg.MaxInFlightBytes) && c.budget.held() > 0) {
			// Wait for room: claiming a sliver at a time costs a
			// round trip per sliver.
			select {
			case <-c.budget.freed:
			case <-poll.C:
			case <-ctx.Done():
				return
			}
			continue
		}
		if !more {
			if wait := time.Until(hotUntil); wait > 0 {
				hot.Reset(min(wait, hotEvery))
			}
			select {
			case <-c.wake:
				hotUntil = time.Now().Add(hotPollWindow)
				hotEvery = hotPoll
			case <-hot.C:
			case <-poll.C:
			case <-ctx.Done():
				return
			}
			// Under a steady stream of writes every NOTIFY would start a
			// claim of the few rows since the last: gather them instead.
			if wait := time.Until(shortAt.Add(c.cfg.ClaimCooldown)); wait > 0 && !publish.Sleep(ctx, wait) {
				return
			}
		}
		if n := c.outage.run(); n >= outageThreshold {
			// The last publishes all failed: the broker is likely down.
			// Back off before claiming more rows only to fail them. A
			// lone poison event retrying stays below the threshold.
			if !publish.Sleep(ctx, backoff(n-outageThreshold+1, 50*time.Millisecond, min(5*time.Second, c.cfg.OutageBackoffMax))) {
				return
			}
		}
		within := min(c.cfg.BatchBytes, max(freeBytes, 1)) // nothing held: one row, however large
		began := time.Now()
		rows, err := c.claimWithin(ctx, min(c.cfg.BatchSize, free), within)
		// Any claim is a poll: the next is due PollInterval after it, and
		// a hot poll armed before it (beaten by a NOTIFY or room freed) is
		// spent; the loop arms the next while the window lasts.
		poll.Reset(c.cfg.PollInterval)
		hot.Stop()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if c.lockout.hit(ctx, err) {
				more = true
				continue // the loop waits for the lock to go
			}
			dbErrors++
			d := backoff(dbErrors, 100*time.Millisecond, 10*time.Second)
			c.log.Warn("relay: claim failed; retrying", "err", err, "in", d)
			if !publish.Sleep(ctx, d) {
				return
			}
			more = true
			continue
		}
		dbErrors = 0
		var bytes int64
		for _, row := range rows {
			bytes += row.bytes
		}
		// Full in rows, or (likely) stopped by the byte budget.
		more = len(rows) == min(c.cfg.BatchSize, free) || (len(rows) > 0 && 2*bytes >= within)
		shortAt = time.Time{}
		if !more {
			shortAt = began
		}
		if len(rows) > 0 {
			c.met.batchSize.Record(ctx, int64(len(rows)), c.met.table)
			hotUntil = time.Now().Add(hotPollWindow)
			hotEvery = hotPoll
		} else {
			hotEvery = hotPollWindow // the rest of the window, then wait
		}
		c.budget.take(len(rows), bytes)
		for _, row := range rows {
			lanes.queue(row)
		}
	}
}

// claimAt is the room in flight (MaxInFlight less the rows held) the
// claimer waits for before it claims. With room for a batch beside a
// batch in flight, as by default, it is a full batch: every claim reads
// the rows the incarnation holds to pass over them (see outboxsql.Claim),
// so claiming fewer, fuller batches reads fewer of them per row taken.
// With less, it is half a batch, so that a few rows slow
// to settle cannot stop the relay from claiming. It is at least one row: a
// claim with no room would take nothing and, looking full, run again at
// once.
func (c *claimer) claimAt() int { return roomFor(c.cfg.BatchSize, c.cfg.MaxInFlight) }

// roomFor is claimAt's rule for a batch and a bound on what is held, in
// rows or in bytes (BatchBytes and MaxInFlightBytes).
func roomFor[T int | int64](batch, limit T) T {
	return max(1, min(batch, limit-batch), min(batch, limit)/2)
}

// claim claims up to limit rows within BatchBytes.
func (c *claimer) claim(ctx context.Context, limit int) ([]*claimedRow, error) {
	return c.claimWithin(ctx, limit, c.cfg.BatchBytes)
}

// claimWithin runs the claim statement for up to limit rows and bytes of
// payload (at least one row), and returns the rows in id order. Only the
// claimer's goroutine calls it.
func (c *claimer) claimWithin(ctx context.Context, limit int, bytes int64) ([]*claimedRow, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StatementTimeout)
	defer cancel()
	if len(c.unconfirmed) > 0 {
		if err := c.releaseUnconfirmed(ctx); err != nil {
			return nil, err
		}
	}
	inc, shards := c.members.claimable()
	if inc == nil || len(shards) == 0 || c.stalled() {
		return nil, nil
	}
	seq := c.seq.Add(1)
	// Before the statement is sent, so no later than the now() the
	// database starts the lease from.
	leaseEnds := c.clock.now() + c.cfg.LeaseDuration - c.cfg.HeartbeatInterval
	var low int64
	if c.low != nil {
		low = c.low.Load()
	}
	q := claimQuery{
		claim:     outboxsql.ClaimArgs{Owner: inc.token, Limit: limit, Lease: c.cfg.LeaseDuration, Shards: shards, Bytes: bytes, Low: low}.Args(),
		seq:       seq,
		inc:       inc,
		leaseEnds: leaseEnds,
	}
	out, bad, err := c.runClaim(ctx, q)
	if err != nil {
		return nil, err
	}
	c.claimed.Add(int64(len(out)))
	if len(bad) > 0 {
		for _, b := range bad {
			c.log.Error("relay: event cannot be decoded; it is dead", "row", b.ID, "err", b.Err)
		}
		c.met.dead.Add(ctx, int64(len(bad)), c.met.table)
	}
	if len(out)+len(bad) == 0 && low > 0 {
		// The claim takes nothing where low no longer holds (an
		// operator's retry or replay below it): read every partition
		// until the next floor round finds low again.
		c.low.CompareAndSwap(low, 0)
	}
	// UPDATE ... RETURNING does not keep the subquery's order.
	slices.SortFunc(out, func(a, b *claimedRow) int { return cmp.Compare(a.id, b.id) })
	return out, nil
}

// claimQuery is one claim: ClaimSettings' and Claim's parameters, and
// what its rows are read with (see scanClaimed).
type claimQuery struct {
	settings, claim []any
	seq             uint64
	inc             *incarnation
	leaseEnds       time.Duration
}

// rowScanner is what scanClaimed reads: *sql.Rows or pgx.Rows.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// claimTx is the claim's transaction on one connection, through pgx
// (pgxClaim) or another database/sql driver (sqlClaim).
type claimTx interface {
	// begin runs BEGIN, ClaimSettings and Claim, and returns Claim's rows.
	begin(ctx context.Context, settings string, settingsArgs []any, claim string, claimArgs []any) (rowScanner, error)
	// endRows closes the rows begin returned.
	endRows() error
	exec(ctx context.Context, query string, args ...any) error
	commit(ctx context.Context) error
	// rollback ends the transaction after an error (a no-op once it
	// ended).
	rollback(ctx context.Context)
}

// runClaim runs the claim's transaction on one connection (the pool's,
// or in a Group one of its claim connections):
// BEGIN, ClaimSettings and Claim, then, once its rows are read and any
// undecodable ones made dead, COMMIT. With the pgx driver the first three
// are sent at once, so a claim costs two round trips instead of four: with
// many small claims (a hundred tables each written ten times a second,
// tenant-fairness) the round trips were most of the claims' cost. The
// COMMIT stays a step of its own: the rows are read before the claim
// commits, so a claim whose rows could not be read (a deadline, a lost
// connection) is rolled back, never committed with rows the relay does not
// hold. A commit whose reply was lost leaves its rows in c.unconfirmed.
func (c *claimer) runClaim(ctx context.Context, q claimQuery) (out []*claimedRow, bad []outboxsql.RowError, err error) {
	conn, kept, done, err := c.conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("claim batch: get connection: %w", err)
	}
	// Whether the claim left the connection unfit to be kept: known from
	// pgx's state (a claim the server failed, on a lock or its own
	// timeout, leaves it idle and its plans worth keeping; one whose
	// context ended first leaves it closed), assumed from the error
	// without pgx.
	broken := true
	defer func() { done(broken) }()
	// Set once the connection is in hand, from what the wait for it left.
	q.settings = outboxsql.ClaimSettingsArgs{
		TxTimeoutArgs: outboxsql.TxTimeoutArgs{Wait: serverTimeout(ctx, c.cfg.StatementTimeout), Idle: c.cfg.StatementTimeout, Lock: c.cfg.LockTimeout},
		Table:         c.sql.table,
	}.Args()
	err = conn.Raw(func(dc any) error {
		pc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return errNotPgx
		}
		out, bad, err = c.claimOn(ctx, &pgxClaim{conn: pc.Conn(), sessionLock: kept}, q)
		broken = pc.Conn().IsClosed() || pc.Conn().PgConn().IsBusy() || pc.Conn().PgConn().TxStatus() != 'I'
		return err
	})
	if errors.Is(err, errNotPgx) {
		out, bad, err = c.claimOn(ctx, &sqlClaim{conn: conn}, q)
		broken = err != nil
	}
	return out, bad, err
}

// conn lends the claim a connection, the group's (claimConns) or the
// pool's, whether it is one the group keeps (whose session's lock timeout
// is the claim's), and the function that gives it back, told whether the
// claim left it unfit to be kept.
func (c *claimer) conn(ctx context.Context) (conn *sql.Conn, kept bool, done func(broken bool), err error) {
	if c.conns == nil {
		conn, err := c.db.Conn(ctx)
		if err != nil {
			return nil, false, nil, err
		}
		return conn, false, func(bool) { conn.Close() }, nil
	}
	cc, err := c.conns.get(ctx)
	if err != nil {
		return nil, false, nil, err
	}
	return cc.conn, !cc.pooled, func(broken bool) { c.conns.put(cc, broken) }, nil
}

// claimOn runs the claim's transaction t: the claim, its rows read, the
// undecodable ones made dead in it, and its commit.
func (c *claimer) claimOn(ctx context.Context, t claimTx, q claimQuery) (out []*claimedRow, bad []outboxsql.RowError, err error) {
	defer func() {
		if err != nil {
			t.rollback(ctx)
		}
	}()
	rows, err := t.begin(ctx, c.sql.claimSettings, q.settings, c.sql.claim, q.claim)
	if err != nil {
		return nil, nil, fmt.Errorf("claim batch: %w", err)
	}
	out, bad, err = scanClaimed(rows, q.seq, q.inc, q.leaseEnds)
	if cerr := t.endRows(); err == nil && cerr != nil {
		err = fmt.Errorf("claim batch: %w", cerr)
	}
	if err != nil {
		return nil, nil, err
	}
	if len(bad) > 0 {
		args, err := outboxsql.MarkUndecodableArgs{Rows: bad, Owner: q.inc.token}.Args()
		if err != nil {
			return nil, nil, fmt.Errorf("claim batch: encode undecodable rows: %w", err)
		}
		if err := t.exec(ctx, c.sql.markUndecodable, args...); err != nil {
			return nil, nil, fmt.Errorf("claim batch: mark undecodable rows dead: %w", err)
		}
	}
	if err := t.commit(ctx); err != nil {
		c.unconfirmed = out
		return nil, nil, fmt.Errorf("claim batch: commit: %w", err)
	}
	return out, bad, nil
}

// pgxClaim is the claim's transaction on a pgx connection: BEGIN and the
// two statements in one batch. Were the connection left in the
// transaction, database/sql would discard it rather than hand it out again
// (pgx's ResetSession), and a Group's claim connections close it
// (runClaim).
//
// pgx prepares a statement it has not prepared on the connection before
// it sends the batch, outside the transaction and its lock timeout, and
// preparing the claim locks the table. So the batch is one only on a
// claim connection a Group keeps, whose session has the lock timeout
// (sessionLock: see claimConns); on another, BEGIN and the settings go
// first, in a round trip of their own.
type pgxClaim struct {
	conn        *pgx.Conn
	sessionLock bool
	batch       pgx.BatchResults
	rows        pgx.Rows
}

func (p *pgxClaim) begin(ctx context.Context, settings string, settingsArgs []any, claim string, claimArgs []any) (rowScanner, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(settings, settingsArgs...)
	if !p.sessionLock {
		if err := p.conn.SendBatch(ctx, b).Close(); err != nil {
			return nil, fmt.Errorf("settings: %w", err)
		}
		b = &pgx.Batch{}
	}
	b.Queue(claim, claimArgs...)
	p.batch = p.conn.SendBatch(ctx, b)
	if p.sessionLock {
		for _, step := range []string{"begin", "settings"} {
			if _, err := p.batch.Exec(); err != nil {
				_ = p.endRows()
				return nil, fmt.Errorf("%s: %w", step, err)
			}
		}
	}
	rows, err := p.batch.Query()
	if err != nil {
		_ = p.endRows()
		return nil, err
	}
	p.rows = rows
	return rows, nil
}

func (p *pgxClaim) endRows() error {
	if p.rows != nil {
		p.rows.Close()
	}
	return p.batch.Close()
}

func (p *pgxClaim) exec(ctx context.Context, query string, args ...any) error {
	_, err := p.conn.Exec(ctx, query, args...)
	return err
}

func (p *pgxClaim) commit(ctx context.Context) error {
	tag, err := p.conn.Exec(ctx, "COMMIT")
	if err == nil && tag.String() != "COMMIT" {
		err = errors.New("the transaction was rolled back")
	}
	return err
}

func (p *pgxClaim) rollback(ctx context.Context) { rollbackPgx(ctx, p.conn) }

// sqlClaim is the claim's transaction through database/sql, with a
// driver other than pgx: four round trips.
type sqlClaim struct {
	conn *sql.Conn
	tx   *sql.Tx
	rows *sql.Rows
}

func (s *sqlClaim) begin(ctx context.Context, settings string, settingsArgs []any, claim string, claimArgs []any) (rowScanner, error) {
	tx, err := s.conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	s.tx = tx
	if _, err := tx.ExecContext(ctx, settings, settingsArgs...); err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	if s.rows, err = tx.QueryContext(ctx, claim, claimArgs...); err != nil {
		return nil, err
	}
	return s.rows, nil
}

func (s *sqlClaim) endRows() error { return s.rows.Close() }

func (s *sqlClaim) exec(ctx context.Context, query string, args ...any) error {
	_, err := s.tx.ExecContext(ctx, query, args...)
	return err
}

func (s *sqlClaim) commit(context.Context) error { return s.tx.Commit() }

func (s *sqlClaim) rollback(context.Context) {
	if s.tx != nil {
		_ = s.tx.Rollback() // a no-op after Commit
	}
}

// releaseUnconfirmed returns to pending the rows of a claim whose commit
// was not confirmed, if it committed after all, so they are claimed again in
// order instead of waiting for their lease. The release is durable before
// the incarnation claims again: until then the rows would count as held in
// its memory.
func (c *claimer) releaseUnconfirmed(ctx context.Context) error {
	n, err := settle(ctx, c.db, c.sql, c.cfg.StatementTimeout, c.cfg.LockTimeout, func(tx *sql.Tx) (int64, error) {
		var n int64
		for owner, ids := range byOwner(c.unconfirmed) {
			res, err := tx.ExecContext(ctx, c.sql.release, outboxsql.RowsArgs{IDs: ids, Owner: owner}.Args()...)
			if err != nil {
				return 0, err
			}
			m, _ := res.RowsAffected()
			n += m
		}
		return n, nil
	})
	if err != nil {
		return fmt.Errorf("release rows of an unconfirmed claim: %w", err)
	}
	if n > 0 {
		c.log.Warn("relay: released rows of a claim whose commit was not confirmed", "rows", n)
	}
	c.unconfirmed = nil
	return nil
}

// scanClaimed reads claimed rows. A row that cannot become a message (its
// headers are not a JSON object of strings) is returned in bad instead, to
// be made dead: one bad row must not fail every claim.
func scanClaimed(rows rowScanner, seq uint64, inc *incarnation, leaseEnds time.Duration) (out []*claimedRow, bad []outboxsql.RowError, err error) {
	for rows.Next() {
		var (
			c       = &claimedRow{seq: seq, inc: inc, leaseEnds: leaseEnds}
			eventID []byte // text, or with pgx 16 bytes
			headers []byte // a jsonb's text (pgx cannot scan jsonb into sql.RawBytes)
		)
		e := &c.event
		if err := rows.Scan(&c.id, &eventID, &e.Topic, &e.AggregateType, &e.AggregateID, &e.Type,
			&e.ContentType, &e.Payload, &headers, &e.CreatedAt, &c.attempts, &c.version); err != nil {
			return nil, nil, fmt.Errorf("claim batch: scan: %w", err)
		}
		if e.ID, err = decodeUUID(eventID); err != nil {
			bad = append(bad, outboxsql.RowError{ID: c.id, Err: storableText("undecodable event: event_id: "+err.Error(), maxErrorText)})
			continue
		}
		if string(headers) != "{}" {
			if err := json.Unmarshal(headers, &e.Headers); err != nil {
				bad = append(bad, outboxsql.RowError{ID: c.id, Err: storableText("undecodable event: headers must be a JSON object of strings: "+err.Error(), maxErrorText)})
				continue
			}
		}
		c.bytes = int64(len(e.Payload))
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("claim batch: %w", err)
	}
	return out, bad, nil
}

// decodeUUID reads an event id as the driver returned it: text, as the
// database/sql drivers for PostgreSQL send a uuid, or its 16 bytes, should
// a driver use the binary format.
func decodeUUID(b []byte) (uuid.UUID, error) {
	if len(b) == 16 {
		return uuid.FromBytes(b)
	}
	return uuid.ParseBytes(b)
}
