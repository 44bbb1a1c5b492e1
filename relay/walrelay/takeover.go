package walrelay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// TakeoverConfig configures Takeover.
type TakeoverConfig struct {
	// Table, Publication and Slot are the WAL relays' (see Config), with
	// the same defaults.
	Table       txoutbox.Table
	Publication string
	Slot        string

	// Force drops the slot even though it holds table-less events it has
	// not confirmed: they exist only in the WAL, so they are lost.
	Force bool

	// LockTimeout bounds the wait for the table lock (writers' open
	// transactions). Default: StatementTimeoutDefault.
	LockTimeout time.Duration
}

// TakeoverResult is what Takeover did.
type TakeoverResult struct {
	// Slot is the slot Takeover dropped, or would have: its name resolves
	// as Run's (see Config.Slot).
	Slot string
	// Confirmed rows were marked published: the slot had confirmed them.
	Confirmed int64
	// Unconfirmed rows stay pending, for the polling relay to publish.
	Unconfirmed int
	// TableLess is the number of table-less events the slot had not
	// confirmed (lost, with Force).
	TableLess int
	// Lost is true when the slot's WAL was gone (wal_status lost): no row
	// could be told confirmed, so every unpublished row stays pending and
	// the polling relay publishes them all, some a second time. Every row
	// stays pending too, with Lost false, when a relay died while it
	// created the slot: the rows written before it were not all published.
	Lost bool
}

// ErrSlotActive is returned by Takeover while a relay streams from the
// slot: stop the WAL relays first.
var ErrSlotActive = errors.New("walrelay: the replication slot is active")

// ErrTableLessPending is returned by Takeover without Force when the slot
// holds table-less events it has not confirmed.
var ErrTableLessPending = errors.New("walrelay: the slot holds table-less events not yet published")

// Takeover hands the outbox of the database connString names (as New
// takes it) to the polling relay: with the WAL relays stopped (it waits a
// few seconds for a slot whose relay has just stopped), it marks published exactly the unpublished rows the slot has
// confirmed, leaves the others pending, and drops the slot, in one
// transaction that holds a SHARE lock on the table, so no event commits
// meanwhile. It reads the unconfirmed changes with
// pg_logical_slot_peek_binary_changes, which decodes all the WAL the slot
// holds: the larger the slot's lag, the longer writers wait. The
// publication stays; drop it with DROP PUBLICATION if the WAL relay is
// not coming back. With the slot gone, `outbox dead retry` and `outbox
// replay` work again (see outboxadmin.ErrWALStreamed). Table-less events
// (txoutbox.WriterConfig.WALMessages) take no table lock: one committed
// while Takeover runs may be missed and is lost with the slot, so stop
// writers of table-less events first. The slot's name resolves as Run's
// (see Config.Slot); a slot of that name in another database is refused
// with ErrSlotOtherDatabase, forced or not, and left alone.
func Takeover(ctx context.Context, connString string, cfg TakeoverConfig) (TakeoverResult, error) {
	var res TakeoverResult
	r, err := newRelay(connString, Config{Table: cfg.Table, Publication: cfg.Publication, Slot: cfg.Slot})
	if err != nil {
		return res, err
	}
	pc, err := pgx.ParseConfig(connString)
	if err != nil {
		return res, fmt.Errorf("%w: connection string: %v", ErrInvalidConfig, err)
	}
	delete(pc.RuntimeParams, "replication")
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return res, fmt.Errorf("walrelay: takeover: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := r.resolveNames(ctx, conn); err != nil {
		return res, err
	}
	res.Slot = r.cfg.Slot
	t := &takeover{cfg: cfg, pc: pc, slot: r.slot(), pub: r.pub(), sql: r.sql, decoding: r.decoding(), lockTimeout: cfg.LockTimeout}
	if t.lockTimeout <= 0 {
		t.lockTimeout = StatementTimeoutDefault
	}
	if err := t.awaitSlotRelease(ctx, conn); err != nil {
		return res, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("walrelay: takeover: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	err = t.run(ctx, tx, &res)
	if err == nil {
		if err = tx.Commit(ctx); err != nil {
			err = fmt.Errorf("walrelay: takeover: commit: %w", err)
		}
	}
	return res, err
}

// takeover is one Takeover, of the names resolved.
type takeover struct {
	cfg         TakeoverConfig
	pc          *pgx.ConnConfig // the database's, without replication
	slot        replicationSlot
	pub         publication
	sql         *statements
	decoding    decoding
	lockTimeout time.Duration
}

// run does the takeover in tx, into res: lock the table, tell the rows
// the slot confirmed, mark them published, drop the slot.
func (t *takeover) run(ctx context.Context, tx pgx.Tx, res *TakeoverResult) error {
	if _, err := tx.Exec(ctx, t.sql.takeoverTimeout, outboxsql.TimeoutArgs{Timeout: t.lockTimeout}.Args()...); err != nil {
		return fmt.Errorf("walrelay: takeover: %w", err)
	}
	if _, err := tx.Exec(ctx, t.sql.takeoverLock); err != nil {
		return fmt.Errorf("walrelay: takeover: lock %s: %w", t.decoding.name, err)
	}
	st, err := t.inactiveSlot(ctx, tx)
	if err != nil {
		return err
	}
	res.Lost = st.walStatus == "lost"
	keep, owned, err := t.confirmed(ctx, tx, st, res)
	if err != nil {
		return err
	}
	if err := t.settle(ctx, tx, keep, owned, res); err != nil {
		return err
	}
	if tag, err := tx.Exec(ctx, t.sql.dropSlot, t.slot.name); err != nil {
		return fmt.Errorf("walrelay: takeover: drop slot: %w", err)
	} else if tag.RowsAffected() != 1 {
		return fmt.Errorf("walrelay: takeover: drop slot %s: it is no longer a slot of database %s", t.slot.name, t.slot.database)
	}
	return nil
}

// inactiveSlot reads the slot under the table lock, and refuses one that
// is missing, of another database, or active.
func (t *takeover) inactiveSlot(ctx context.Context, tx pgx.Tx) (slotState, error) {
	st, err := t.slot.state(ctx, tx)
	if err != nil {
		return st, err
	}
	if !st.exists {
		return st, fmt.Errorf("walrelay: takeover: no replication slot %s (database %s)", t.slot.name, t.slot.database)
	}
	if !st.here {
		// Checked before anything else: the slot streams another
		// database's outbox, whatever this one's state.
		return st, fmt.Errorf("walrelay: takeover: %w", t.slot.otherDatabase(st,
			"it streams that database's outbox and is left alone; name this database's slot, or none for the WAL relay's default"))
	}
	if st.active {
		return st, fmt.Errorf("%w: %s: stop the WAL relays first", ErrSlotActive, t.slot.name)
	}
	return st, nil
}

// confirmed returns the rows the slot has not confirmed (keep), and
// whether the relay owns the slot, so that every other unpublished row
// may be told confirmed; it counts the slot's table-less events into res.
//
// Rows can be told confirmed only on a slot the relay owns (see marker):
// a relay that died while it set the slot up had not published all the
// rows before it, and on a slot made by hand, or whose publication
// changed, rows may have passed unstreamed. Then every unpublished row
// stays pending.
func (t *takeover) confirmed(ctx context.Context, tx pgx.Tx, st slotState, res *TakeoverResult) (keep []int64, owned bool, err error) {
	var srv serverFacts
	if err := tx.QueryRow(ctx, t.sql.server).Scan(&srv.VersionNum, &srv.WALLevel, &srv.Replication); err != nil {
		return nil, false, fmt.Errorf("walrelay: takeover: %w", err)
	}
	fp, pubErr := t.pub.check(ctx, tx, srv)
	if pubErr != nil && !errors.Is(pubErr, ErrPublication) {
		return nil, false, fmt.Errorf("walrelay: takeover: %w", pubErr)
	}
	mark, _, err := t.pub.readMarker(ctx, tx)
	if err != nil {
		return nil, false, fmt.Errorf("walrelay: takeover: %w", err)
	}
	owned = pubErr == nil && t.pub.owns(mark, st, fp)
	switch {
	case res.Lost:
	case pubErr != nil && !t.cfg.Force:
		return nil, false, fmt.Errorf("walrelay: takeover: %w; with Force (--force) the slot is dropped anyway, every unpublished row stays pending and "+
			"the table-less events the slot had not confirmed are lost", pubErr)
	case pubErr != nil:
		// The slot cannot be read without its publication as it was.
	default:
		if err := flushWAL(ctx, t.pc, t.lockTimeout); err != nil {
			return nil, false, err
		}
		if keep, res.TableLess, err = t.unconfirmed(ctx, tx); err != nil {
			return nil, false, err
		}
		if res.TableLess > 0 && !t.cfg.Force {
			return nil, false, fmt.Errorf("%w: %d table-less events exist only in the slot's WAL and would be lost; start a WAL relay to publish them, or force", ErrTableLessPending, res.TableLess)
		}
	}
	return keep, owned, nil
}

// settle marks published the unpublished rows but keep, when the slot's
// WAL is whole and the relay owns it, and counts into res the rows left
// pending.
func (t *takeover) settle(ctx context.Context, tx pgx.Tx, keep []int64, owned bool, res *TakeoverResult) error {
	if !res.Lost && owned {
		tag, err := tx.Exec(ctx, t.sql.markAllBut, outboxsql.Int64Array(keep))
		if err != nil {
			return fmt.Errorf("walrelay: takeover: mark confirmed rows: %w", err)
		}
		res.Confirmed = tag.RowsAffected()
	}
	res.Unconfirmed = len(keep)
	if res.Lost || !owned {
		if err := tx.QueryRow(ctx, t.sql.unpublished).Scan(&res.Unconfirmed); err != nil {
			return fmt.Errorf("walrelay: takeover: %w", err)
		}
	}
	return nil
}

// slotReleaseWait bounds how long Takeover waits for an active slot to be
// released. A relay that has just stopped has closed its connection, but
// its walsender process exits, and releases the slot, a moment later.
const slotReleaseWait = 5 * time.Second

// awaitSlotRelease waits, up to slotReleaseWait and before any lock is
// taken, for the slot to be inactive. It returns nil when it still is not:
// the check under the table lock decides, with ErrSlotActive.
func (t *takeover) awaitSlotRelease(ctx context.Context, conn *pgx.Conn) error {
	deadline := time.Now().Add(slotReleaseWait)
	for {
		st, err := t.slot.state(ctx, conn)
		if err != nil {
			return fmt.Errorf("walrelay: takeover: %w", err)
		}
		if !st.active || !st.here || time.Now().After(deadline) {
			return nil
		}
		if !publish.Sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// flushWAL makes sure the WAL of every transaction that committed before
// the takeover's table lock is flushed: the slot decodes only flushed WAL,
// and a writer with synchronous_commit = off commits, is visible and
// releases its lock before its WAL is. A transaction that writes WAL and
// commits synchronously flushes all WAL before its commit record; on
// another connection, as the takeover's own transaction must not commit.
// Its message has a prefix no outbox uses and goes with the slot.
func flushWAL(ctx context.Context, pc *pgx.ConnConfig, timeout time.Duration) error {
	fctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(fctx, pc)
	if err != nil {
		return fmt.Errorf("walrelay: takeover: flush the WAL: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = pgx.BeginFunc(fctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(fctx, outboxsql.WALFlush); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("walrelay: takeover: flush the WAL: %w", err)
	}
	return nil
}

// unconfirmed decodes the changes the slot holds past its confirmed
// position: the ids of the rows inserted, and the number of table-less
// events.
func (t *takeover) unconfirmed(ctx context.Context, tx pgx.Tx) (rows []int64, tableLess int, err error) {
	dec, err := t.decoding.decoder(ctx, tx)
	if err != nil {
		return nil, 0, err
	}
	res, err := tx.Query(ctx, t.sql.peek, outboxsql.PeekArgs{Slot: t.slot.name, Publication: t.pub.name}.Args()...)
	if err != nil {
		return nil, 0, fmt.Errorf("walrelay: takeover: read the slot: %w", err)
	}
	defer res.Close()
	for res.Next() {
		var data []byte
		if err := res.Scan(&data); err != nil {
			return nil, 0, err
		}
		m, err := parseMessage(data)
		if err != nil {
			return nil, 0, fmt.Errorf("walrelay: takeover: decode: %w", err)
		}
		switch m := m.(type) {
		case *pglogrepl.RelationMessage:
			dec.relation(m)
		case *insertMessage:
			row, ok, err := dec.rowID(m)
			if err != nil {
				return nil, 0, fmt.Errorf("walrelay: takeover: %w", err)
			}
			if ok {
				rows = append(rows, row)
			}
		case *pglogrepl.LogicalDecodingMessage:
			if _, ok, _ := dec.message(m); ok && m.Transactional {
				tableLess++
			}
		}
	}
	if err := res.Err(); err != nil {
		return nil, 0, fmt.Errorf("walrelay: takeover: read the slot: %w", err)
	}
	return rows, tableLess, nil
}
