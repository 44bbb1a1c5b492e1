package mysqlclaim

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// ErrInvalidParams is returned, wrapped, by Claim, Mark, Fail and Release
// for parameters they cannot run with; the error names the one at fault.
var ErrInvalidParams = errors.New("mysqlclaim: invalid parameters")

// MaxLimit is the largest Params.Limit: a claim reads up to twice as many
// candidates, and its statements bind several parameters for each, under
// MySQL's 65,535 per statement.
const MaxLimit = 5000

// maxIDsPerStatement bounds the ids one Mark or Release statement binds.
const maxIDsPerStatement = 5000

// TxBeginner is what Claim and Fail run on: a *sql.DB, or a *sql.Conn to
// keep them on one session.
type TxBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Execer is what Mark and Release run on: a *sql.DB, *sql.Conn or *sql.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Params are a claim's.
type Params struct {
	// Owner is the claiming relay incarnation: an id in the relays table.
	// A claim by an incarnation not there takes nothing.
	Owner string
	// Limit is the most rows to take, 1 to MaxLimit.
	Limit int
	// Lease is how long the rows are held: until then no other
	// incarnation takes them while Owner is in the relays table.
	Lease time.Duration
	// Shards are the shards (0 to 255) to claim from; nil: every shard.
	Shards []int16
	// Bytes bounds the payload bytes taken; at least one row is taken
	// however large. 0: no bound.
	Bytes int64
	// After is the Version of Owner's previous claim, if any: this claim's
	// Version is later, even if the database's clock stepped back, so no
	// two claims of one incarnation share a version.
	After time.Time
	// LockWait bounds how long the claim waits for the claim gate (an
	// operator's retry or replay holds it), in whole seconds, at least
	// one (innodb_lock_wait_timeout, set for the session, whose setting
	// it stays after the claim). 0: the session's setting.
	LockWait time.Duration
	// Undecodable, when not nil, tells of a row taken why it cannot
	// become a message ("" when it can): such a row is made dead in the
	// claim's transaction and returned in Claimed.Dead, not in Rows, so
	// one bad row neither fails every claim nor is claimed again.
	Undecodable func(Row) string
}

func (p Params) validate() error {
	switch {
	case p.Owner == "":
		return fmt.Errorf("%w: Owner is empty", ErrInvalidParams)
	case p.Limit < 1 || p.Limit > MaxLimit:
		return fmt.Errorf("%w: Limit %d is not between 1 and %d", ErrInvalidParams, p.Limit, MaxLimit)
	case p.Lease < time.Microsecond:
		return fmt.Errorf("%w: Lease %s is not positive", ErrInvalidParams, p.Lease)
	case p.Bytes < 0:
		return fmt.Errorf("%w: Bytes %d is negative", ErrInvalidParams, p.Bytes)
	case p.LockWait < 0:
		return fmt.Errorf("%w: LockWait %s is negative", ErrInvalidParams, p.LockWait)
	}
	for _, s := range p.Shards {
		if s < 0 || s > 255 {
			return fmt.Errorf("%w: shard %d is not between 0 and 255", ErrInvalidParams, s)
		}
	}
	return nil
}

// Row is a claimed row: what is published of it.
type Row struct {
	ID            int64
	EventID       string
	Topic         string
	AggregateType string
	AggregateID   string
	EventType     string
	ContentType   string
	Payload       []byte
	Headers       string // a JSON object
	CreatedAt     time.Time
	Attempts      int // failed publishes so far
}

// Claimed is what a claim took.
type Claimed struct {
	// Rows are the rows taken, in id order: every earlier unpublished row
	// of each one's aggregate is held by the claiming incarnation or is
	// among them.
	Rows []Row
	// Version fences the rows' settlement (Mark, Fail, Release): the
	// lease's end, as the claim wrote it. Zero when Rows is empty.
	Version time.Time
	// Now is the database's clock as the claim read it.
	Now time.Time
	// Dead are the rows taken that Params.Undecodable refused, made dead
	// in the claim's transaction.
	Dead []Undecodable
}

// Undecodable is a row made dead by its claim: its id and why.
type Undecodable struct {
	ID  int64
	Err string
}

// candidate is a row a claim read without locking it.
type candidate struct {
	id        int64
	aggregate string
	owner     string // the lease's holder: its key (outboxsql.MySQLLeaseKey) as bytes
	expires   outboxsql.MySQLTime
	retry     bool // read by MySQLClaimRetry
}

// Claim takes up to p.Limit due rows for p.Owner, in one READ COMMITTED
// transaction: it takes the claim gate and reads the clock, reads the
// candidates without locking (first attempts in id order, due retries),
// checks which lease holders are live, finds each candidate aggregate's
// first row that holds it back, locks the due candidates FOR UPDATE SKIP
// LOCKED, picks per aggregate in id order up to the first row not due,
// not locked, or behind a row that holds it back, and leases the rows
// picked. See internal/outboxsql/claim_mysql.md.
func Claim(ctx context.Context, db TxBeginner, n outboxsql.Names, p Params) (Claimed, error) {
	if err := p.validate(); err != nil {
		return Claimed{}, err
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return Claimed{}, fmt.Errorf("mysqlclaim: begin claim: %w", err)
	}
	defer tx.Rollback()
	c, err := claim(ctx, tx, n, p)
	if err != nil {
		return Claimed{}, err
	}
	if len(c.Rows) == 0 && len(c.Dead) == 0 {
		return c, nil // nothing changed: the deferred rollback ends it
	}
	if err := tx.Commit(); err != nil {
		// The commit's outcome is unknown (its reply may be lost after
		// it committed): the rows go back with the error, for the caller
		// to release under their Version.
		return c, fmt.Errorf("mysqlclaim: commit claim: %w", err)
	}
	return c, nil
}

func claim(ctx context.Context, tx *sql.Tx, n outboxsql.Names, p Params) (Claimed, error) {
	if p.LockWait > 0 {
		if _, err := outboxsql.MySQLExec(ctx, tx, outboxsql.MySQLLockWait, outboxsql.MySQLLockWaitArgs{Wait: p.LockWait}.Args()); err != nil {
			return Claimed{}, fmt.Errorf("mysqlclaim: set lock wait: %w", err)
		}
	}
	var (
		floor int64
		clock outboxsql.MySQLTime
	)
	err := tx.QueryRowContext(ctx, n.Render(outboxsql.MySQLClaimGate)).Scan(&floor, &clock)
	if errors.Is(err, sql.ErrNoRows) {
		return Claimed{}, fmt.Errorf("mysqlclaim: the claim floor %s has no row: run the migrations", n.Floor)
	} else if err != nil {
		return Claimed{}, fmt.Errorf("mysqlclaim: take the claim gate: %w", err)
	}
	now := clock.Time.UTC()
	out := Claimed{Now: now}

	cands, err := candidates(ctx, tx, n, p, floor, now)
	if err != nil {
		return Claimed{}, err
	}
	if len(cands) == 0 {
		return out, nil
	}

	gone, ok, err := liveness(ctx, tx, n, p.Owner, cands, now)
	if err != nil || !ok {
		return out, err
	}
	blocker, err := blockers(ctx, tx, n, p.Owner, cands, now)
	if err != nil {
		return Claimed{}, err
	}

	// The candidates worth locking: per aggregate, in id order, up to the
	// first one not due by what was read, or behind its first blocker.
	stopped := map[string]bool{}
	var lock []int64
	for _, c := range cands {
		if stopped[c.aggregate] {
			continue
		}
		if b, ok := blocker[c.aggregate]; (ok && b < c.id) || !due(c, now, gone) {
			stopped[c.aggregate] = true
			continue
		}
		lock = append(lock, c.id)
	}
	if len(lock) == 0 {
		return out, nil
	}
	locked, err := lockDue(ctx, tx, n, lock, now, gone)
	if err != nil {
		return Claimed{}, err
	}

	// The pick: the same walk, stopping an aggregate at a row the lock
	// passed over too (another session holds it, or it changed), and the
	// whole walk once the rows taken pass the byte budget.
	clear(stopped)
	var bytes int64
	for _, c := range cands {
		if stopped[c.aggregate] {
			continue
		}
		r, ok := locked[c.id]
		if b, blocked := blocker[c.aggregate]; (blocked && b < c.id) || !ok {
			stopped[c.aggregate] = true
			continue
		}
		if p.Bytes > 0 && len(out.Rows) > 0 && bytes+int64(len(r.Payload)) > p.Bytes {
			break
		}
		bytes += int64(len(r.Payload))
		out.Rows = append(out.Rows, r)
	}
	if len(out.Rows) == 0 {
		return out, nil
	}

	version := now.Add(p.Lease).Truncate(time.Microsecond)
	if !p.After.IsZero() && !version.After(p.After) {
		version = p.After.Truncate(time.Microsecond).Add(time.Microsecond)
	}
	ids := make([]int64, len(out.Rows))
	for i, r := range out.Rows {
		ids[i] = r.ID
	}
	res, err := outboxsql.MySQLExec(ctx, tx, outboxsql.MySQLClaimTake(n, len(ids)),
		outboxsql.MySQLSettleArgs{Owner: p.Owner, Version: version, IDs: ids}.Args())
	if err != nil {
		return Claimed{}, fmt.Errorf("mysqlclaim: lease %d rows: %w", len(ids), err)
	}
	if k, err := res.RowsAffected(); err != nil || k != int64(len(ids)) {
		return Claimed{}, fmt.Errorf("mysqlclaim: lease %d rows locked by the claim changed %d (%v)", len(ids), k, err)
	}
	out.Version = version
	if p.Undecodable != nil {
		if err := markUndecodable(ctx, tx, n, p, &out); err != nil {
			return Claimed{}, err
		}
	}
	return out, nil
}

// markUndecodable makes dead, in the claim's transaction, the rows out
// took that p.Undecodable refuses, and moves them from out.Rows to
// out.Dead.
func markUndecodable(ctx context.Context, tx *sql.Tx, n outboxsql.Names, p Params, out *Claimed) error {
	kept := out.Rows[:0]
	var stmt string
	for _, r := range out.Rows {
		why := p.Undecodable(r)
		if why == "" {
			kept = append(kept, r)
			continue
		}
		if stmt == "" {
			stmt = n.Render(outboxsql.MySQLMarkUndecodable)
		}
		args := outboxsql.MySQLUndecodableArgs{ID: r.ID, Err: why, Owner: p.Owner, Version: out.Version}
		if _, err := outboxsql.MySQLExec(ctx, tx, stmt, args.Args()); err != nil {
			return fmt.Errorf("mysqlclaim: make undecodable row %d dead: %w", r.ID, err)
		}
		out.Dead = append(out.Dead, Undecodable{ID: r.ID, Err: why})
	}
	out.Rows = kept
	return nil
}

// due reports whether c was due as read: unleased (its lease ended long
// ago: outboxsql.MySQLNoLease), or under a lease that expired or whose
// holder is gone. The rows the claimer holds under a live lease were not
// read.
func due(c candidate, now time.Time, gone map[string]bool) bool {
	return !c.expires.Time.After(now) || gone[c.owner]
}

// candidates reads the first attempts and the due retries, and keeps the
// first p.Limit of them in id order.
func candidates(ctx context.Context, tx *sql.Tx, n outboxsql.Names, p Params, floor int64, now time.Time) ([]candidate, error) {
	var (
		cands   []candidate
		retries []int64
	)
	seen := map[int64]bool{}
	// Retries first: the first attempts behind them are candidates too.
	for _, retry := range []bool{true, false} {
		stmt := outboxsql.MySQLClaimRetry(n, len(p.Shards))
		if !retry {
			stmt = outboxsql.MySQLClaimFresh(n, len(p.Shards), len(retries))
		}
		args := outboxsql.MySQLClaimReadArgs{Retry: retry, Floor: floor, Now: now, Shards: p.Shards, Owner: p.Owner,
			Retries: retries, Limit: p.Limit}
		rows, err := outboxsql.MySQLQuery(ctx, tx, stmt, args.Args())
		if err != nil {
			return nil, fmt.Errorf("mysqlclaim: read candidates (retries: %t): %w", retry, err)
		}
		for rows.Next() {
			var (
				c          candidate
				agg, owner []byte
			)
			if err := rows.Scan(&c.id, &agg, &owner, &c.expires); err != nil {
				rows.Close()
				return nil, fmt.Errorf("mysqlclaim: read candidates: %w", err)
			}
			c.aggregate, c.owner, c.retry = string(agg), string(owner), retry
			if retry {
				retries = append(retries, c.id)
			}
			// A row is in both only if its lane changed between the
			// reads: it is kept once.
			if !seen[c.id] {
				seen[c.id] = true
				cands = append(cands, c)
			}
		}
		if err := rows.Close(); err != nil {
			return nil, fmt.Errorf("mysqlclaim: read candidates: %w", err)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("mysqlclaim: read candidates: %w", err)
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int { return cmp.Compare(a.id, b.id) })
	if len(cands) > p.Limit {
		// Cutting at the limit drops the highest ids only: every earlier
		// candidate of a kept row's aggregate is kept.
		cands = cands[:p.Limit]
	}
	return cands, nil
}

// liveness reports whether owner is in the relays table (ok), and which
// holders of the candidates' unexpired leases are not (gone, by key).
func liveness(ctx context.Context, tx *sql.Tx, n outboxsql.Names, owner string, cands []candidate, now time.Time) (gone map[string]bool, ok bool, err error) {
	own := outboxsql.MySQLLeaseKey(owner)
	asked := [][]byte{own}
	gone = map[string]bool{}
	for _, c := range cands {
		if c.owner != string(own) && c.expires.Time.After(now) && !gone[c.owner] {
			gone[c.owner] = true
			asked = append(asked, []byte(c.owner))
		}
	}
	rows, err := outboxsql.MySQLQuery(ctx, tx, outboxsql.MySQLClaimLive(n, len(asked)), outboxsql.MySQLIDsArgs[[]byte]{IDs: asked}.Args())
	if err != nil {
		return nil, false, fmt.Errorf("mysqlclaim: read the live relays: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key []byte
		if err := rows.Scan(&key); err != nil {
			return nil, false, fmt.Errorf("mysqlclaim: read the live relays: %w", err)
		}
		if string(key) == string(own) {
			ok = true
		}
		delete(gone, string(key))
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("mysqlclaim: read the live relays: %w", err)
	}
	return gone, ok, nil
}

// blockers returns, per candidate aggregate with a retry among its
// candidates, the id of its first unpublished row below its last
// candidate that is neither a candidate nor held by owner under a live
// lease: no candidate after it is taken. An aggregate whose candidates
// are all first attempts has none, by the fresh read alone (see
// claim_mysql.md, "Blockers"), and is not probed; with no retry among the
// candidates, no statement is sent.
func blockers(ctx context.Context, tx *sql.Tx, n outboxsql.Names, owner string, cands []candidate, now time.Time) (map[string]int64, error) {
	isCand := make(map[int64]bool, len(cands))
	probed := map[string]bool{}
	for _, c := range cands {
		isCand[c.id] = true
		if c.retry {
			probed[c.aggregate] = true
		}
	}
	if len(probed) == 0 {
		return nil, nil
	}
	index := map[string]int{}
	var probes []outboxsql.MySQLAggregateProbe
	for _, c := range cands {
		if !probed[c.aggregate] {
			continue
		}
		i, ok := index[c.aggregate]
		if !ok {
			i = len(probes)
			index[c.aggregate] = i
			probes = append(probes, outboxsql.MySQLAggregateProbe{AggregateID: c.aggregate})
		}
		probes[i].Below = max(probes[i].Below, c.id)
		probes[i].Candidates++
	}
	args := outboxsql.MySQLClaimBlockersArgs{Aggregates: probes, Owner: owner, Now: now}
	rows, err := outboxsql.MySQLQuery(ctx, tx, outboxsql.MySQLClaimBlockers(n, len(probes)), args.Args())
	if err != nil {
		return nil, fmt.Errorf("mysqlclaim: read the rows that hold back %d aggregates: %w", len(probes), err)
	}
	defer rows.Close()
	first := map[string]int64{}
	for rows.Next() {
		var (
			agg []byte
			id  int64
		)
		if err := rows.Scan(&agg, &id); err != nil {
			return nil, fmt.Errorf("mysqlclaim: read the rows that hold back aggregates: %w", err)
		}
		if isCand[id] {
			continue
		}
		if b, ok := first[string(agg)]; !ok || id < b {
			first[string(agg)] = id
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysqlclaim: read the rows that hold back aggregates: %w", err)
	}
	return first, nil
}

// lockDue locks those of ids still due, passing over rows another session
// holds, and returns them by id.
func lockDue(ctx context.Context, tx *sql.Tx, n outboxsql.Names, ids []int64, now time.Time, gone map[string]bool) (map[int64]Row, error) {
	args := outboxsql.MySQLClaimLockArgs{IDs: ids, Now: now}
	keys := slices.Sorted(maps.Keys(gone))
	for _, k := range keys {
		args.Gone = append(args.Gone, []byte(k))
	}
	rows, err := outboxsql.MySQLQuery(ctx, tx, outboxsql.MySQLClaimLock(n, len(ids), len(args.Gone)), args.Args())
	if err != nil {
		return nil, fmt.Errorf("mysqlclaim: lock %d rows: %w", len(ids), err)
	}
	defer rows.Close()
	locked := make(map[int64]Row, len(ids))
	for rows.Next() {
		var (
			r       Row
			agg     []byte
			created outboxsql.MySQLTime
		)
		if err := rows.Scan(&r.ID, &r.EventID, &r.Topic, &r.AggregateType, &agg, &r.EventType, &r.ContentType,
			&r.Payload, &r.Headers, &created, &r.Attempts); err != nil {
			return nil, fmt.Errorf("mysqlclaim: read the locked rows: %w", err)
		}
		r.AggregateID, r.CreatedAt = string(agg), created.Time
		locked[r.ID] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysqlclaim: read the locked rows: %w", err)
	}
	return locked, nil
}
