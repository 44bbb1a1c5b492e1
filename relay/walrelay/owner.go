package walrelay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// ErrPublication is returned by Run when the publication does not carry
// every insert of the outbox table: it is missing, does not publish
// inserts, lacks the table or one of the columns the relay reads, or has a
// row filter. The cleanup would take the rows it does not stream for
// published, so the relay refuses to run; the message says how to fix it.
// Rows written meanwhile stay in the table and are published by the next
// relay once the publication is right.
var ErrPublication = errors.New("walrelay: the publication does not carry every insert of the outbox table")

// The relay deletes rows once the slot has confirmed them, which is right
// only for a slot its relays have streamed since it was made, through a
// publication that carried every insert all along. It records that it
// owns a slot in the publication's comment (a marker):
//
//	txoutbox: slot <slot> up to <lsn> publication <fingerprint> settled <id>
//
// The relay never confirms the slot past <lsn>, its ceiling, and raises it
// only while its walsender holds the slot (see outboxsql.WALCeiling), so a
// slot dropped and made again, by hand or by infrastructure, which starts
// at the position of its creation, is confirmed past the ceiling and is
// not taken for the relay's. The fingerprint is the publication's
// (outboxsql.WALPublicationCheck) when the relay took the slot over: a
// publication changed since (a table dropped from it and added back, the
// table altered) may have let inserts pass unstreamed. On a slot it does
// not own the relay republishes the table's unpublished rows before it
// streams (see slotSetup), instead of deleting them as confirmed.
//
// <id> bounds the rows of the slot's stream the table may hold as
// published (see resume): a relay that resumes reads it instead of walking
// the table for the highest published row. It is 0 for a slot the relay
// created, whose stream holds no row published from the table, the
// table's highest id after the setup of a slot it did not create, and
// raised with the ceiling as the cleanup marks rows published. A marker
// without it (-1 here) makes the next relay walk the table once.
type marker struct {
	initialising bool   // a relay creates or takes over the slot now, or died doing it
	slot         string // the slot the marker is for
	ceiling      uint64
	fingerprint  string
	settled      int64 // -1: unknown
}

const (
	markerInit  = "txoutbox: initialising slot "
	markerOwner = "txoutbox: slot "
)

// parseMarker reads a publication's comment: any comment that is not a
// marker, a relay's from before markers or a person's, is no marker, so
// the slot is not taken for the relay's.
func parseMarker(s string) marker {
	if rest, ok := strings.CutPrefix(s, markerInit); ok {
		return marker{initialising: true, slot: rest}
	}
	rest, ok := strings.CutPrefix(s, markerOwner)
	if !ok {
		return marker{}
	}
	f := strings.Fields(rest) // S up to LSN publication FP [settled ID]
	if len(f) != 6 && len(f) != 8 || f[1] != "up" || f[2] != "to" || f[4] != "publication" {
		return marker{}
	}
	lsn, err := pglogrepl.ParseLSN(f[3])
	if err != nil {
		return marker{}
	}
	m := marker{slot: f[0], ceiling: uint64(lsn), fingerprint: f[5], settled: -1}
	if len(f) == 8 {
		id, err := strconv.ParseInt(f[7], 10, 64)
		if f[6] != "settled" || err != nil || id < 0 {
			return marker{}
		}
		m.settled = id
	}
	return m
}

func (m marker) String() string {
	if m.initialising {
		return markerInit + m.slot
	}
	s := fmt.Sprintf("%s%s up to %s publication %s", markerOwner, m.slot, pglogrepl.LSN(m.ceiling), m.fingerprint)
	if m.settled >= 0 {
		s += fmt.Sprintf(" settled %d", m.settled)
	}
	return s
}

// publication reads and writes what the relay keeps in its publication,
// of the names Run resolved: whether it carries every insert of the table,
// and the marker of the slot the relay owns (see marker).
type publication struct {
	name, slot string
	sql        *statements
	timeout    time.Duration // Config.StatementTimeout
	log        *slog.Logger
}

// pub is the relay's publication, by the names resolved.
func (r *Relay) pub() publication {
	return publication{name: r.cfg.Publication, slot: r.cfg.Slot, sql: r.sql, timeout: r.cfg.StatementTimeout, log: r.log}
}

// check checks that the publication carries every insert of the table
// and returns its fingerprint; the error matches ErrPublication and says
// what to run.
func (p publication) check(ctx context.Context, q pgxQuerier, srv serverFacts) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	var (
		inserts, carries         bool
		filter, missing, printed string
	)
	lists := srv.VersionNum >= columnListVersion
	check := p.sql.publicationCheckOld
	if lists {
		check = p.sql.publicationCheck
	}
	args := outboxsql.PublicationCheckArgs{Publication: p.name, Table: p.sql.table, Columns: rowColumns[:]}
	err := q.QueryRow(ctx, check, args.Args()...).
		Scan(&inserts, &carries, &filter, &missing, &printed)
	pub, table := p.name, p.sql.table
	setTable := fmt.Sprintf("ALTER PUBLICATION %s SET TABLE %s", pub, table)
	if lists {
		setTable += " (" + outboxsql.WALColumns + ")"
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", p.gone()
	case err != nil:
		return "", fmt.Errorf("read publication %s: %w", pub, err)
	case !inserts:
		return "", fmt.Errorf("%w: publication %s does not publish inserts: ALTER PUBLICATION %s SET (publish = 'insert')", ErrPublication, pub, pub)
	case !carries:
		return "", fmt.Errorf("%w: publication %s does not carry %s: %s (a partitioned outbox is carried through its root: "+
			"ALTER PUBLICATION %s SET (publish_via_partition_root = true))", ErrPublication, pub, table, setTable, pub)
	case filter != "":
		return "", fmt.Errorf("%w: publication %s filters the rows of %s (WHERE %s): %s", ErrPublication, pub, table, filter, setTable)
	case missing != "":
		return "", fmt.Errorf("%w: publication %s does not carry the columns %s of %s (if they were dropped from the table, add them back): %s",
			ErrPublication, pub, missing, table, setTable)
	}
	return printed, nil
}

// owns reports whether m says the relay's own streaming made st's position
// through the publication as it is now (see marker).
func (p publication) owns(m marker, st slotState, fingerprint string) bool {
	return st.exists && !m.initialising && m.slot == p.slot && st.confirmed <= m.ceiling && m.fingerprint == fingerprint
}

// readMarker reads the publication's marker, and whether the publication
// exists.
func (p publication) readMarker(ctx context.Context, q pgxQuerier) (marker, bool, error) {
	s, ok, err := p.comment(ctx, q)
	return parseMarker(s), ok, err
}

// disown clears the relay's marker of its slot, after it found the
// publication changed: the next relay republishes the table's unpublished
// rows, those the stream may have missed among them.
func (p publication) disown(ctx context.Context, pool *pgxpool.Pool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
	defer cancel()
	m, ok, err := p.readMarker(ctx, pool)
	if err != nil || !ok || m.slot != p.slot {
		return
	}
	if _, err := pool.Exec(ctx, outboxsql.WALSetMarker(p.name, "")); err != nil {
		p.log.Warn("could not clear the publication's marker", "err", err)
	}
}

// Ceiling upkeep: the stream never confirms past the ceiling, so the
// relay raises it as the stream advances, every ceilingInterval once the
// stream is ceilingStep past it and at least every ceilingIdle while it
// is past it at all (an idle outbox, where only keepalives move it). The
// marker's settled row is written with it, and within a ceilingInterval
// of the cleanup marking rows published past it.
const (
	ceilingInterval = 250 * time.Millisecond
	ceilingStep     = 64 << 10
	ceilingIdle     = 5 * time.Second
)

// ceilingKeeper raises the ceiling while the stream runs on the
// walsender of process pid.
type ceilingKeeper struct {
	pool        *pgxpool.Pool
	pid         uint32
	pub         publication
	fingerprint string          // the publication's when the session took the slot
	confirmed   *atomic.Uint64  // read: the position the stream has settled up to
	settled     *highestSettled // read: written to the marker with the ceiling
	ceiling     *atomic.Uint64  // raised
}

// run raises the ceiling until ctx ends.
func (k *ceilingKeeper) run(ctx context.Context) {
	t := time.NewTicker(ceilingInterval)
	defer t.Stop()
	last := time.Now()
	wrote := k.settled.load()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, ceil, s := k.confirmed.Load(), k.ceiling.Load(), k.settled.load()
		advanced := c > ceil && (c-ceil >= ceilingStep || time.Since(last) >= ceilingIdle)
		if !advanced && s <= wrote {
			continue
		}
		if err := k.raise(ctx, s); err != nil {
			if ctx.Err() == nil {
				k.pub.log.Warn("could not raise the slot's ceiling; the slot's position waits", "err", err)
			}
			continue
		}
		last, wrote = time.Now(), s
	}
}

// raise sets the ceiling to the WAL insert position, while the walsender
// holds the slot, and the marker's settled row to settled.
func (k *ceilingKeeper) raise(ctx context.Context, settled int64) error {
	ctx, cancel := context.WithTimeout(ctx, k.pub.timeout)
	defer cancel()
	var ceiling uint64
	err := pgx.BeginFunc(ctx, k.pool, func(tx pgx.Tx) error {
		var lsn string
		if err := tx.QueryRow(ctx, k.pub.sql.ceiling, outboxsql.CeilingArgs{Slot: k.pub.slot, PID: k.pid}.Args()...).Scan(&lsn); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("slot %s is no longer held by this relay's walsender", k.pub.slot)
			}
			return err
		}
		l, err := pglogrepl.ParseLSN(lsn)
		if err != nil {
			return err
		}
		ceiling = uint64(l)
		m := marker{slot: k.pub.slot, ceiling: ceiling, fingerprint: k.fingerprint, settled: max(settled, -1)}
		_, err = tx.Exec(ctx, outboxsql.WALSetMarker(k.pub.name, m.String()))
		return err
	})
	if err != nil {
		return err
	}
	k.ceiling.Store(max(k.ceiling.Load(), ceiling))
	return nil
}
