package outboxsql

import (
	"crypto/sha256"
	"strings"
	"time"
)

// The relay's claim cycle on MySQL and MariaDB: claim, mark, fail,
// release. There is no RETURNING and no way to lock inside one statement
// what a subquery reads, so a claim is several statements in one short
// READ COMMITTED transaction, run by internal/mysqlclaim, which picks the
// rows to take in Go between them. Every locking read is a plain
// single-table SELECT by primary key. claim_mysql.md beside this file
// gives the reasons, fact by fact. Lists of ids, shards and aggregates are
// one placeholder each: the builders below take their lengths.
// internal/mysqlclaim sends them with the arguments inlined (MySQLInline).
//
// A claim's version, which fences the statements that settle its rows, is
// the lease_expires_at it wrote (the schema has no xmin): every change a
// claim, mark, fail or release makes to a row sets or clears it.
//
// The lease is two fixed-size NOT NULL columns (schema version 3), so that
// leasing a row and clearing its lease rewrite it in place instead of
// growing it on a page the inserts packed full: lease_owner is the
// holder's MySQLLeaseKey, lease_expires_at its end; a row no one holds has
// MySQLNoLease in both, which never matches a key and has long expired.

// MySQLLeaseKey is the lease_owner an incarnation's token is stored as:
// the first 16 bytes of its SHA-256. A token ("<Config.ID>#<random>") has
// no fixed length, and a fixed-size column is what lets a lease be written
// in place. Two live incarnations collide with a chance of about 2^-128.
// SQL finds a lease's holder in the relays table by the same key of each
// relay's id (MySQLRelayLeaseKey): the table holds a row per live relay, so
// computing it there costs nothing, and it needs no column of its own.
func MySQLLeaseKey(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:16]
}

// MySQLRelayLeaseKey is MySQLLeaseKey in SQL, of the id of a relay r in
// the relays table (utf8mb4, whose bytes SHA2 hashes as Go's do): the
// first 32 hexadecimal digits of its SHA-256, as bytes. Both servers have
// SHA2 and UNHEX.
const MySQLRelayLeaseKey = "UNHEX(LEFT(SHA2(r.id, 256), 32))"

// MySQLNoLeaseOwner is lease_owner of a row no one holds: sixteen zero
// bytes, which no key is but with a chance of 2^-128.
const MySQLNoLeaseOwner = "X'00000000000000000000000000000000'"

// MySQLNoLease is the assignment that clears a row's lease: the columns'
// defaults, which the writers' inserts leave them at. lease_expires_at
// has MySQLNeverRetried, earlier than any clock, so a lease test on it
// alone (lease_expires_at <= now) holds of a row no one holds.
const MySQLNoLease = "lease_owner = " + MySQLNoLeaseOwner + ", lease_expires_at = '" + MySQLNeverRetried + "'"

// MySQLClaimGate opens a claim: it takes the claim gate shared, an S lock
// on the claim floor's one row, which operators' retry and replay take
// FOR UPDATE, so no claim reads rows older than a retry that commits while
// it runs; and it reads the floor and the database clock once, for every
// later step. LOCK IN SHARE MODE is the spelling both servers accept
// (MariaDB has no FOR SHARE). It returns no row if the floor's row is
// missing.
const MySQLClaimGate = `SELECT floor, UTC_TIMESTAMP(6) FROM {{floor}} WHERE one = 1 LOCK IN SHARE MODE`

// MySQLAnyDue tells, in one statement of one round trip (no parameters,
// so the driver sends it as text, outside any transaction), whether a
// claim could take anything: a first attempt (lane 1, due on commit) or a
// retry or scheduled event whose retry_at has passed (lane 2). Rows held
// under a live lease count too, so it errs only towards claiming. With no
// LISTEN/NOTIFY the relay polls often; an idle poll costs this one probe
// of each lane of outbox_lane_idx instead of a claim's transaction.
const MySQLAnyDue = `SELECT EXISTS (SELECT 1 FROM {{table}} FORCE INDEX ({{index lane}}) WHERE lane = 1)
    OR EXISTS (SELECT 1 FROM {{table}} FORCE INDEX ({{index lane}}) WHERE lane = 2 AND retry_at <= UTC_TIMESTAMP(6))`

// MySQLLockWait bounds how long the statements after it in the session
// wait for a row lock (whole seconds, at least 1; MySQLLockWaitArgs): a
// claim's wait for the claim gate. It is a session setting: both servers
// have it, and neither has a per-transaction form both accept.
const MySQLLockWait = `SET SESSION innodb_lock_wait_timeout = ?`

// MySQLLockWaitArgs binds MySQLLockWait.
type MySQLLockWaitArgs struct {
	Wait time.Duration
}

// Args returns the parameters in order.
func (a MySQLLockWaitArgs) Args() []any { return []any{max(1, int64(a.Wait/time.Second))} }

// mysqlNotOwnLive is true of a row the claiming incarnation does not hold
// under a live lease (a row no one holds too: MySQLNoLease); its
// parameters are the owner's key and the claim's clock.
const mysqlNotOwnLive = `(lease_owner <> ? OR lease_expires_at <= ?)`

// MySQLClaimFresh reads, without locking, the first Limit first
// attempts (lane 1) from the claim floor on, in id order on
// outbox_lane_idx (lane, retry_at, id, shard: a first attempt's retry_at
// is MySQLNeverRetried, so lane 1 is in id order there, and the order
// names retry_at so that neither server sorts), of shards shard lists
// (0: every shard), but those the
// incarnation holds under a live lease. It passes over a row behind an
// earlier retry of its aggregate (lane 2) that is neither held by the
// incarnation under a live lease nor one of the retries MySQLClaimRetry
// read (retries ids, bound after the lease's parameters): one probe of
// outbox_aggregate_idx per row, a scalar subquery, which both servers run
// per row and stop at its first match. So an aggregate in backoff cannot
// fill the window and hold back every other, and a first attempt is never
// a candidate while an earlier retry of its aggregate is not. While the
// table has no retry at all, which one probe of lane 2 tells
// (uncorrelated: both servers evaluate it once, in the statement's read
// view), the per-row probes are not run: OR stops at it. Columns: id,
// aggregate_id, lease_owner, lease_expires_at (not the payload's length:
// the pick counts the bytes of the rows locked, and LENGTH reads a
// payload stored off-page). Binds
// MySQLClaimReadArgs.
func MySQLClaimFresh(n Names, shards, retries int) string {
	notRead := ""
	if retries > 0 {
		notRead = " AND b.id NOT IN (" + mysqlPlaceholders(retries) + ")"
	}
	return n.Render(`SELECT o.id, o.aggregate_id, o.lease_owner, o.lease_expires_at
FROM {{table}} o FORCE INDEX ({{index lane}})
WHERE o.lane = 1 AND o.id >= ?` + mysqlShardFilter("o", shards) + ` AND ` + strings.ReplaceAll(mysqlNotOwnLive, "lease_", "o.lease_") + `
  AND (NOT EXISTS (SELECT 1 FROM {{table}} r FORCE INDEX ({{index lane}}) WHERE r.lane = 2)
    OR (SELECT 1 FROM {{table}} b FORCE INDEX ({{index aggregate}})
       WHERE b.aggregate_id = o.aggregate_id AND b.lane = 2 AND b.id < o.id` + notRead + `
         AND ` + strings.ReplaceAll(mysqlNotOwnLive, "lease_", "b.lease_") + `
       LIMIT 1) IS NULL)
ORDER BY o.lane, o.retry_at, o.id
LIMIT ?`)
}

// MySQLClaimRetry reads, without locking, the first Limit retries (lane
// 2) whose retry_at has passed, in retry_at order on outbox_lane_idx, of
// shards shard lists (0: every shard), but those the incarnation holds
// under a live lease. A retry in backoff is not read at all, and a retry
// behind an earlier row of its aggregate still in backoff (one probe of
// outbox_aggregate_idx) is passed over, as MySQLClaimFresh's rows are.
// Columns as MySQLClaimFresh's. Binds MySQLClaimReadArgs.
func MySQLClaimRetry(n Names, shards int) string {
	return n.Render(`SELECT o.id, o.aggregate_id, o.lease_owner, o.lease_expires_at
FROM {{table}} o FORCE INDEX ({{index lane}})
WHERE o.lane = 2 AND o.retry_at <= ?` + mysqlShardFilter("o", shards) + ` AND ` + strings.ReplaceAll(mysqlNotOwnLive, "lease_", "o.lease_") + `
  AND ` + mysqlNotInBackoff + `
ORDER BY o.lane, o.retry_at
LIMIT ?`)
}

// mysqlNotInBackoff is true of a row o with no earlier row of its
// aggregate in backoff (a retry whose retry_at, a parameter, has not
// come): one probe of outbox_aggregate_idx, a scalar subquery, which both
// servers run per row and stop at its first match (MariaDB may rewrite an
// EXISTS into a join).
const mysqlNotInBackoff = `(SELECT 1 FROM {{table}} b FORCE INDEX ({{index aggregate}})
       WHERE b.aggregate_id = o.aggregate_id AND b.lane = 2 AND b.id < o.id AND b.retry_at > ?
       LIMIT 1) IS NULL`

// mysqlShardFilter is the shard condition of a list of shards bound
// one placeholder each; none for 0, every shard.
func mysqlShardFilter(alias string, shards int) string {
	if shards <= 0 {
		return ""
	}
	return " AND " + alias + ".shard IN (" + mysqlPlaceholders(shards) + ")"
}

// mysqlPlaceholders is k placeholders, comma-separated.
func mysqlPlaceholders(k int) string {
	return strings.TrimSuffix(strings.Repeat("?,", k), ",")
}

// MySQLClaimReadArgs binds MySQLClaimFresh and MySQLClaimRetry.
type MySQLClaimReadArgs struct {
	Retry   bool      // MySQLClaimRetry's parameters, not MySQLClaimFresh's
	Floor   int64     // the claim floor (fresh only)
	Now     time.Time // the claim's clock (MySQLClaimGate)
	Shards  []int16   // as many as the statement was built for
	Owner   string    // the claiming incarnation's token
	Retries []int64   // the retries read (fresh only), as many as the statement was built for
	Limit   int
}

// Args returns the parameters in order.
func (a MySQLClaimReadArgs) Args() []any {
	now, key := a.Now.UTC(), MySQLLeaseKey(a.Owner)
	args := make([]any, 0, 6+len(a.Shards))
	if a.Retry {
		args = append(args, now)
	} else {
		args = append(args, a.Floor)
	}
	for _, s := range a.Shards {
		args = append(args, s)
	}
	args = append(args, key, now)
	if a.Retry {
		return append(args, now, a.Limit)
	}
	for _, id := range a.Retries {
		args = append(args, id)
	}
	return append(args, key, now, a.Limit)
}

// MySQLClaimLive reads which of k lease keys (MySQLLeaseKey) belong to
// live incarnations: in the relays table, by its id's key. The claim
// asks for itself (it takes nothing when it is not) and for the holders
// of unexpired leases on the rows it read: a lease whose holder has left
// counts as expired. Columns: the key. Binds MySQLIDsArgs ([]byte keys).
func MySQLClaimLive(n Names, k int) string {
	return n.Render(`SELECT ` + MySQLRelayLeaseKey + ` FROM {{relays}} r WHERE ` + MySQLRelayLeaseKey + ` IN (` + mysqlPlaceholders(k) + `)`)
}

// MySQLClaimBlockers finds, for each of aggs aggregates, the rows that
// may hold back the claim's candidates of it: the first unpublished rows
// of each lane, in id order on outbox_aggregate_idx, below the
// aggregate's highest candidate, that the incarnation does not hold under
// a live lease. Each part reads at most its LIMIT entries, the
// aggregate's candidates plus one, so the first row returned that is not
// a candidate is the aggregate's first blocker in that lane, if it has
// one, however many rows it has in backoff. Columns: aggregate_id, id.
// Binds MySQLClaimBlockersArgs.
func MySQLClaimBlockers(n Names, aggs int) string {
	const part = `(SELECT aggregate_id, id FROM {{table}} FORCE INDEX ({{index aggregate}})
 WHERE aggregate_id = ? AND lane = %d AND id < ? AND ` + mysqlNotOwnLive + `
 ORDER BY lane, id LIMIT ?)`
	parts := make([]string, 0, 2*aggs)
	for i := 0; i < aggs; i++ {
		parts = append(parts, strings.Replace(part, "%d", "1", 1), strings.Replace(part, "%d", "2", 1))
	}
	return n.Render(strings.Join(parts, "\nUNION ALL\n"))
}

// MySQLClaimBlockersArgs binds MySQLClaimBlockers.
type MySQLClaimBlockersArgs struct {
	Aggregates []MySQLAggregateProbe
	Owner      string // the claiming incarnation's token
	Now        time.Time
}

// MySQLAggregateProbe is one aggregate of MySQLClaimBlockers: its id,
// its highest candidate's id, and its number of candidates.
type MySQLAggregateProbe struct {
	AggregateID string
	Below       int64
	Candidates  int
}

// Args returns the parameters in order.
func (a MySQLClaimBlockersArgs) Args() []any {
	now, key := a.Now.UTC(), MySQLLeaseKey(a.Owner)
	args := make([]any, 0, 10*len(a.Aggregates))
	for _, g := range a.Aggregates {
		for range 2 {
			args = append(args, []byte(g.AggregateID), g.Below, key, now, g.Candidates+1)
		}
	}
	return args
}

// MySQLClaimLock locks, FOR UPDATE SKIP LOCKED, those of ids rows (by
// primary key) that are still due by the latest committed version, which
// a locking read sees: unpublished, out of backoff, and unleased or under
// a lease that expired or whose holder (one of gone owners) has left; a
// row another session holds is passed over. It reads what is published
// of them: id, event_id, topic, aggregate_type, aggregate_id, event_type,
// content_type, payload, headers, created_at, attempts. Binds
// MySQLClaimLockArgs.
func MySQLClaimLock(n Names, ids, gone int) string {
	goneTest := ""
	if gone > 0 {
		goneTest = " OR lease_owner IN (" + mysqlPlaceholders(gone) + ")"
	}
	return n.Render(`SELECT id, event_id, topic, aggregate_type, aggregate_id, event_type, content_type, payload,
       CAST(headers AS CHAR), created_at, attempts
FROM {{table}} FORCE INDEX (PRIMARY)
WHERE id IN (` + mysqlPlaceholders(ids) + `) AND lane > 0 AND retry_at <= ?
  AND (lease_expires_at <= ?` + goneTest + `)
FOR UPDATE SKIP LOCKED`)
}

// MySQLClaimLockArgs binds MySQLClaimLock.
type MySQLClaimLockArgs struct {
	IDs  []int64
	Now  time.Time
	Gone [][]byte // keys of holders of unexpired leases not in the relays table
}

// Args returns the parameters in order.
func (a MySQLClaimLockArgs) Args() []any {
	args := make([]any, 0, len(a.IDs)+2+len(a.Gone))
	for _, id := range a.IDs {
		args = append(args, id)
	}
	args = append(args, a.Now.UTC(), a.Now.UTC())
	for _, g := range a.Gone {
		args = append(args, g)
	}
	return args
}

// MySQLClaimTake leases the picked rows, which the claim's transaction
// holds locked, to the incarnation: lease_owner (its key) and
// lease_expires_at, the claim's version, both rewritten in place. It sets
// nothing else: a row claimed stays pending, and
// its retry_at (so its lane) is unchanged. Binds MySQLSettleArgs.
func MySQLClaimTake(n Names, ids int) string {
	return n.Render(`UPDATE {{table}} SET lease_owner = ?, lease_expires_at = ? WHERE id IN (` + mysqlPlaceholders(ids) + `)`)
}

// MySQLMarkPublished records broker acknowledgements for ids rows that
// the owner still holds under the claim of the version given: a row
// taken over, re-claimed, released or replayed since has another
// lease_expires_at (or none, MySQLNoLease) and is left alone. Binds MySQLSettleArgs.
func MySQLMarkPublished(n Names, ids int) string {
	return n.Render(`UPDATE {{table}}
SET state = 'published', published_at = UTC_TIMESTAMP(6), ` + MySQLNoLease + `
WHERE lease_owner = ? AND lease_expires_at = ? AND id IN (` + mysqlPlaceholders(ids) + `) AND state IN ('pending', 'claimed')`)
}

// MySQLRelease returns ids rows that the owner holds under the claim of
// the version given to pending, due at once, their attempts unchanged: a
// released first attempt is one again, a released retry keeps its
// retry_at, which has passed. Binds MySQLSettleArgs.
func MySQLRelease(n Names, ids int) string {
	return n.Render(`UPDATE {{table}}
SET state = 'pending', ` + MySQLNoLease + `
WHERE lease_owner = ? AND lease_expires_at = ? AND id IN (` + mysqlPlaceholders(ids) + `) AND state IN ('pending', 'claimed')`)
}

// MySQLSettleArgs binds MySQLClaimTake, MySQLMarkPublished and
// MySQLRelease.
type MySQLSettleArgs struct {
	Owner   string    // the claiming incarnation's token
	Version time.Time // the claim's lease_expires_at
	IDs     []int64
}

// Args returns the parameters in order.
func (a MySQLSettleArgs) Args() []any {
	args := make([]any, 0, 2+len(a.IDs))
	args = append(args, MySQLLeaseKey(a.Owner), a.Version.UTC())
	for _, id := range a.IDs {
		args = append(args, id)
	}
	return args
}

// MySQLFail records one failed publish of a row the owner holds under
// the claim of the version given, as Fail does on PostgreSQL: the attempt
// counts; a permanent failure (the event's own fault) that reaches the
// most attempts makes the row dead, any other leaves it pending with
// retry_at at the backoff's end (lane 2, a retry); the lease goes. state
// is assigned before attempts: both servers assign a single-table
// UPDATE's columns left to right, each seeing those before it. Binds
// MySQLFailArgs.
const MySQLFail = `UPDATE {{table}}
SET state = CASE WHEN ? AND attempts + 1 >= ? THEN 'dead' ELSE 'pending' END,
    attempts = attempts + 1,
    retry_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
    last_error = ?,
    ` + MySQLNoLease + `
WHERE id = ? AND lease_owner = ? AND lease_expires_at = ? AND state IN ('pending', 'claimed')`

// MySQLFailArgs binds MySQLFail.
type MySQLFailArgs struct {
	MySQLFailure
	MaxAttempts int
}

// MySQLFailure is one failed publish.
type MySQLFailure struct {
	ID        int64
	Owner     string    // the token of the incarnation that claimed it
	Version   time.Time // the claim's version
	Err       string
	Permanent bool // the event's own fault: it may make the row dead
	Delay     time.Duration
}

// Args returns the parameters in order.
func (a MySQLFailArgs) Args() []any {
	return []any{a.Permanent, a.MaxAttempts, max(a.Delay, 0).Microseconds(), a.Err, a.ID, MySQLLeaseKey(a.Owner), a.Version.UTC()}
}

// MySQLMarkUndecodable makes dead a row the claim's transaction just
// leased that cannot become a message (its event_id or headers do not
// decode), as MarkUndecodable does: the attempt counts, and the row's
// error says why. It runs in the claim's transaction, so one bad row
// neither fails every claim nor is claimed again. Binds
// MySQLUndecodableArgs.
const MySQLMarkUndecodable = `UPDATE {{table}}
SET state = 'dead', attempts = attempts + 1, last_error = ?, ` + MySQLNoLease + `
WHERE id = ? AND lease_owner = ? AND lease_expires_at = ? AND state IN ('pending', 'claimed')`

// MySQLUndecodableArgs binds MySQLMarkUndecodable.
type MySQLUndecodableArgs struct {
	ID      int64
	Err     string
	Owner   string    // the claiming incarnation's token
	Version time.Time // the claim's
}

// Args returns the parameters in order.
func (a MySQLUndecodableArgs) Args() []any {
	return []any{a.Err, a.ID, MySQLLeaseKey(a.Owner), a.Version.UTC()}
}

// MySQLFailOutcome reads the state of the failed rows recorded (dead or
// pending), in the transaction that recorded them. Binds MySQLIDsArgs.
func MySQLFailOutcome(n Names, ids int) string {
	return n.Render(`SELECT id, state FROM {{table}} WHERE id IN (` + mysqlPlaceholders(ids) + `)`)
}

// MySQLIDsArgs binds MySQLFailOutcome and the operators' statements that
// take lists: one value per placeholder.
type MySQLIDsArgs[T int64 | string | []byte] struct {
	IDs []T
}

// Args returns the parameters in order.
func (a MySQLIDsArgs[T]) Args() []any {
	args := make([]any, len(a.IDs))
	for i, id := range a.IDs {
		args[i] = id
	}
	return args
}

// mysqlRelayStatements is the statements above, rendered at sizes the
// grammar test parses (MySQLStatements).
func mysqlRelayStatements(n Names) map[string]string {
	return map[string]string{
		"MySQLClaimGate":        n.Render(MySQLClaimGate),
		"MySQLAnyDue":           n.Render(MySQLAnyDue),
		"MySQLLockWait":         MySQLLockWait,
		"MySQLClaimFresh(0,0)":  MySQLClaimFresh(n, 0, 0),
		"MySQLClaimFresh(3,2)":  MySQLClaimFresh(n, 3, 2),
		"MySQLClaimRetry(0)":    MySQLClaimRetry(n, 0),
		"MySQLClaimRetry(3)":    MySQLClaimRetry(n, 3),
		"MySQLClaimLive(2)":     MySQLClaimLive(n, 2),
		"MySQLClaimBlockers(1)": MySQLClaimBlockers(n, 1),
		"MySQLClaimBlockers(3)": MySQLClaimBlockers(n, 3),
		"MySQLClaimLock(3,0)":   MySQLClaimLock(n, 3, 0),
		"MySQLClaimLock(3,2)":   MySQLClaimLock(n, 3, 2),
		"MySQLClaimTake(3)":     MySQLClaimTake(n, 3),
		"MySQLMarkPublished(3)": MySQLMarkPublished(n, 3),
		"MySQLRelease(3)":       MySQLRelease(n, 3),
		"MySQLFail":             n.Render(MySQLFail),
		"MySQLFailOutcome(3)":   MySQLFailOutcome(n, 3),
		"MySQLMarkUndecodable":  n.Render(MySQLMarkUndecodable),

		// As the claim cycle sends them: with their arguments inlined.
		"MySQLClaimFresh(3,2) inlined": inlined(MySQLClaimFresh(n, 3, 2), MySQLClaimReadArgs{Floor: 1, Now: at,
			Shards: []int16{1, 2, 3}, Owner: "r-1", Retries: []int64{4, 5}, Limit: 10}.Args()),
		"MySQLClaimRetry(1) inlined": inlined(MySQLClaimRetry(n, 1), MySQLClaimReadArgs{Retry: true, Now: at,
			Shards: []int16{7}, Owner: "r-1", Limit: 10}.Args()),
		"MySQLClaimLive(2) inlined": inlined(MySQLClaimLive(n, 2), MySQLIDsArgs[[]byte]{IDs: [][]byte{MySQLLeaseKey("r-1"), MySQLLeaseKey("it's")}}.Args()),
		"MySQLClaimBlockers(2) inlined": inlined(MySQLClaimBlockers(n, 2), MySQLClaimBlockersArgs{Owner: "r-1", Now: at,
			Aggregates: []MySQLAggregateProbe{{AggregateID: "a", Below: 9, Candidates: 2}, {AggregateID: "", Below: 3, Candidates: 1}}}.Args()),
		"MySQLClaimLock(2,1) inlined":   inlined(MySQLClaimLock(n, 2, 1), MySQLClaimLockArgs{IDs: []int64{1, 2}, Now: at, Gone: [][]byte{MySQLLeaseKey("r-2")}}.Args()),
		"MySQLClaimTake(2) inlined":     inlined(MySQLClaimTake(n, 2), MySQLSettleArgs{Owner: "r-1", Version: at, IDs: []int64{1, 2}}.Args()),
		"MySQLMarkPublished(2) inlined": inlined(MySQLMarkPublished(n, 2), MySQLSettleArgs{Owner: "r-1", Version: at, IDs: []int64{1, 2}}.Args()),
		"MySQLFail inlined": inlined(n.Render(MySQLFail), MySQLFailArgs{MySQLFailure: MySQLFailure{ID: 1, Owner: "r-1", Version: at,
			Err: "boom", Permanent: true, Delay: time.Second}, MaxAttempts: 3}.Args()),
		"MySQLLockWait inlined": inlined(MySQLLockWait, MySQLLockWaitArgs{Wait: time.Second}.Args()),
	}
}

// at is a time the inlined statements above bind.
var at = time.Date(2025, 1, 2, 3, 4, 5, 678900000, time.UTC)

// inlined is MySQLInline's text, or its error, which does not parse.
func inlined(stmt string, args []any) string {
	s, err := MySQLInline(stmt, args)
	if err != nil {
		return err.Error()
	}
	return s
}
