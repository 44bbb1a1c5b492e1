package outboxsql

import (
	"encoding/json"
	"math"
	"strconv"
	"time"
)

// Relay statements. Each statement that takes parameters has an Args type
// beside it that binds them in order, so no statement is called with
// positional values chosen far from its text. Id and shard lists are passed
// as array literals ('{1,2,3}') and per-row values as a JSON document, so the
// statements work with any database/sql driver.
//
// Ordering rests on one rule that Claim enforces in the database: a row is
// claimed only if every earlier unpublished row of its aggregate is claimed
// by the same relay incarnation (which holds it in memory ahead of the new
// row, or had it acknowledged) or is taken by the same claim. See package
// relay's documentation for why that keeps first deliveries in order.

// Claim takes up to Limit due rows of the shards in Shards for Owner (a
// relay incarnation), under a lease of Lease, and returns them. One
// statement in a short transaction (see ClaimSettings).
//
// Its cost is bounded by Limit, however many rows wait in retry backoff:
// a row that failed has a retry_at (schema version 5), and the claim reads
// first attempts and retries apart, on indexes that leave the rows in
// backoff out, instead of walking past them.
//
//   - "retry" takes the first Limit retries whose retry_at has passed, on
//     outbox_retry_idx (retry_at order), in the shards in Shards: due
//     retries and retries claimed since (in flight, or under an expired
//     lease). A retry in backoff is not read at all. A retry behind an
//     earlier row of its aggregate still in backoff (an event scheduled
//     for tomorrow, then one due now: Event.NotBefore) is passed over, one
//     probe of outbox_retry_agg_idx each, so such rows cannot fill the
//     window and hold back every other aggregate's retries.
//   - "fresh" walks outbox_fresh_idx (first attempts: rows never failed)
//     in id order over the shards and keeps the first Limit rows no retry
//     of their aggregate comes before, other than those in "retry". That
//     check is one probe of outbox_retry_agg_idx per row walked (a
//     subquery with LIMIT 1, which PostgreSQL runs per row rather than
//     joining the whole index; skipped, by a one-time test, while no
//     unpublished row has a retry_at), so an aggregate with a row in backoff
//     does not fill the window: its later rows are left out, and the
//     rows in backoff themselves are never walked. The shards are a
//     parameter, not a join, so the planner stops at the limit instead of
//     sorting every unpublished row; a bit mask (ShardMask), since the
//     claim runs on a generic plan, where "shard = ANY(array)" would scan
//     the array for every row walked.
//   - Both pass over the rows the incarnation holds under a live lease (in
//     flight, or acknowledged with the mark not committed yet), which are
//     not blockers (see below), and keep rows held by others and rows not
//     due.
//   - "seen" is the first Limit rows of both in id order, with each
//     retry marked blocked (neither due nor the incarnation's) if an
//     earlier unpublished row of its aggregate is in neither and not held
//     by the incarnation (one probe of outbox_aggregate_idx per retry).
//     Every row of an aggregate is in the same shard, so for every row of
//     "seen" not blocked, every earlier unpublished row of its aggregate
//     is in "seen" too or held by the incarnation: for a first attempt,
//     the walk is in id order and a retry outside "retry" would have left
//     it out; for a retry, by the probe; and cutting "seen" at Limit drops
//     the highest ids only. The rules below rest on that alone.
//   - "seen" also keeps the running total, in id order, of the payload
//     bytes of its rows (octet_length reads a TOASTed payload's size from
//     its pointer, without fetching it), which bounds the claim in bytes:
//     the due rows claimed are those within Bytes, and the first due row
//     however large (it is then claimed alone). They are a prefix, in id
//     order, of the due rows, so no row is claimed ahead of an earlier row
//     of its aggregate; the rest wait for the next claim.
//   - "due" collects the tuple ids of those due rows into one array.
//   - "took" locks those rows with SKIP LOCKED, re-checking that each is
//     still due. It passes over rows another transaction holds: a
//     concurrent claim, an operator's retry, a frozen session, a peer's
//     mark or release. The rows are reached by their tuple ids, not by
//     walking an index again. A row changed since the snapshot is passed
//     over too where the TID scan's recheck compares the tuple ids, as
//     PostgreSQL 15.20 does (releases without that recheck lock the row's
//     latest version and re-check it there).
//   - "stop" holds the due rows "took" did not lock (passed over, or
//     changed) and the rows not due (in backoff, blocked, or held by
//     another incarnation). Usually "took" locked every due row, which its
//     count shows, and then the test of each due row against "took" (a
//     hash of the locked ids) is left out. Membership is tested with NOT
//     IN, which PostgreSQL answers from a hash of the subquery whatever
//     the row estimates; an IN becomes a join whose method follows the
//     estimates, and a generic plan (a prepared statement after five
//     runs) estimates the CTEs at one row and picks a nested loop:
//     quadratic in the batch, 90 ms for 1,000 rows.
//   - The rows claimed are the due rows of "seen" that are not in "stop"
//     and come after no row of their aggregate in "stop" that is not the
//     incarnation's: a row in backoff, a row another incarnation holds, a
//     row SKIP LOCKED passed over or one that changed since the snapshot.
//     Taken rows after such a row are not claimed (their locks end with the
//     transaction), so no row is ever claimed while an earlier row of its
//     aggregate is held by anyone else or by no one. The test keeps one row
//     per aggregate of "stop", its first, so it stays linear when "stop"
//     holds many rows of one aggregate.
//   - When "stop" is empty, as while a relay drains its own shards, the
//     rows claimed are all the due rows, and the array "due" is updated as
//     it is. With that and the count, a claim does about a tenth less
//     PostgreSQL work per row than computing the missed rows, the blocked
//     aggregates and the claimed rows as CTEs of their own each time
//     (instructions counted under callgrind).
//   - A row claimed by Owner is not a blocker: the incarnation holds it in
//     memory, ahead of later rows of its aggregate in the same lane, or the
//     broker acknowledged it and its mark is not committed yet (or the mark
//     was lost in a database crash: the row is claimed again once its lease
//     ends, and published again). A relay that drops rows from memory
//     without recording them starts a new incarnation, so its old rows
//     block like anyone else's.
//   - It returns the columns as stored, without casts to text: a
//     database/sql driver receives uuid and jsonb values as text
//     anyway, and a cast would convert each value once more. It also
//     returns xmin, the claim's transaction id, which its marks check
//     (see MarkPublished).
//   - The final UPDATE reaches the rows by the tuple ids "seen" read. Where
//     "took" locked a changed row on its latest version (see above), the
//     update follows it there itself, as through an index.
//   - Nothing here locks the relays table: a relay frozen inside a claim
//     holds only outbox rows, which its peers skip.
//   - A claim is recorded in the lease columns alone (lease_owner,
//     lease_expires_at) and leaves state 'pending': a row is claimed when
//     it has a lease_owner. No index covers those columns (nor retry_at's
//     indexes anything a claim changes), so with the free space schema
//     version 3 leaves in each page (fillfactor) the update is heap-only
//     (HOT): no index entry is added, and the mark later finds room on the
//     same page. It also sets next_attempt_at to the lease's end, so that
//     a relay of schema version 2 (which claims pending rows past
//     next_attempt_at and knows a claim by state 'claimed') sees the row
//     as not due until then and holds back the aggregate's later rows;
//     rows it claimed (state 'claimed', with a lease_owner) are claimed to
//     this statement too. Release resets next_attempt_at. Relays of
//     version 3 or 4 fail rows without setting retry_at: such a row is
//     walked as a first attempt and, in backoff, holds back its aggregate
//     as a row not due.
const Claim = `
WITH live AS MATERIALIZED (
    SELECT id FROM {{relays}}
), retry AS MATERIALIZED (
    SELECT o.ctid AS tid, o.id, o.aggregate_id, o.lease_owner, o.lease_expires_at, o.next_attempt_at,
           octet_length(o.payload) AS bytes
    FROM {{table}} o
    WHERE o.state IN ('pending', 'claimed') AND o.retry_at > '-infinity' AND o.retry_at <= now()
      AND get_bit($4::varbit, o.shard) = 1
      AND (o.lease_owner IS DISTINCT FROM $1 OR o.lease_expires_at <= now())
      AND NOT EXISTS (SELECT 1 FROM {{table}} h
                      WHERE h.aggregate_id = o.aggregate_id AND h.id < o.id
                        AND h.state IN ('pending', 'claimed') AND h.retry_at > now())
      AND EXISTS (SELECT 1 FROM live WHERE id = $1)
    ORDER BY o.retry_at
    LIMIT $2
), fresh AS MATERIALIZED (
    SELECT o.ctid AS tid, o.id, o.aggregate_id, o.lease_owner, o.lease_expires_at, o.next_attempt_at,
           octet_length(o.payload) AS bytes
    FROM {{table}} o
    WHERE o.state IN ('pending', 'claimed') AND o.retry_at = '-infinity'
      AND get_bit($4::varbit, o.shard) = 1
      AND (o.lease_owner IS DISTINCT FROM $1 OR o.lease_expires_at <= now())
      AND (NOT (SELECT EXISTS (SELECT 1 FROM {{table}} WHERE state IN ('pending', 'claimed') AND retry_at > '-infinity'))
        OR (SELECT true FROM {{table}} b
            WHERE b.aggregate_id = o.aggregate_id AND b.id < o.id
              AND b.state IN ('pending', 'claimed') AND b.retry_at > '-infinity'
              AND (b.lease_owner IS DISTINCT FROM $1 OR b.lease_expires_at <= now())
              AND b.id NOT IN (SELECT id FROM retry)
            LIMIT 1) IS NULL)
      AND EXISTS (SELECT 1 FROM live WHERE id = $1)
    ORDER BY o.id
    LIMIT $2
), seen AS MATERIALIZED (
    SELECT c.tid, c.id, c.aggregate_id,
           NOT c.blocked AND ((c.lease_owner IS NULL AND c.next_attempt_at <= now())
             OR (c.lease_owner IS NOT NULL AND (c.lease_expires_at <= now()
                 OR c.lease_owner NOT IN (SELECT id FROM live)))) AS due,
           NOT c.blocked AND coalesce(c.lease_owner = $1, false) AS mine,
           sum(c.bytes) OVER (ORDER BY c.id) AS upto
    FROM (
        SELECT f.tid, f.id, f.aggregate_id, f.lease_owner, f.lease_expires_at, f.next_attempt_at, f.bytes, false AS blocked
        FROM fresh f
        UNION ALL
        SELECT r.tid, r.id, r.aggregate_id, r.lease_owner, r.lease_expires_at, r.next_attempt_at, r.bytes,
               (SELECT true FROM {{table}} x
                WHERE x.aggregate_id = r.aggregate_id AND x.id < r.id AND x.state IN ('pending', 'claimed')
                  AND (x.lease_owner IS DISTINCT FROM $1 OR x.lease_expires_at <= now())
                  AND x.id NOT IN (SELECT id FROM fresh) AND x.id NOT IN (SELECT id FROM retry)
                LIMIT 1) IS NOT NULL
        FROM retry r
    ) c
    ORDER BY c.id
    LIMIT $2
), due AS MATERIALIZED (
    SELECT ARRAY(SELECT tid FROM seen WHERE due AND (upto <= $5 OR id = f.first)) AS tids, f.first
    FROM (SELECT min(id) AS first FROM seen WHERE due) f
), took AS MATERIALIZED (
    SELECT o.id
    FROM {{table}} o
    WHERE o.ctid = ANY ((SELECT tids FROM due)::tid[])
      AND o.state IN ('pending', 'claimed')
      AND ((o.lease_owner IS NULL AND o.next_attempt_at <= now())
        OR (o.lease_owner IS NOT NULL AND (o.lease_expires_at <= now()
            OR o.lease_owner NOT IN (SELECT id FROM live))))
    FOR UPDATE OF o SKIP LOCKED
), stop AS MATERIALIZED (
    SELECT s.id, s.aggregate_id, s.mine FROM seen s
    WHERE NOT s.due
       OR (s.due AND (SELECT count(*) FROM took) < (SELECT cardinality(tids) FROM due)
           AND s.id NOT IN (SELECT id FROM took))
)
UPDATE {{table}} o
SET lease_owner = $1, lease_expires_at = now() + $3::interval, next_attempt_at = now() + $3::interval
WHERE o.ctid = ANY (CASE WHEN NOT EXISTS (SELECT 1 FROM stop) THEN (SELECT tids FROM due)::tid[]
    ELSE ARRAY(
        SELECT s.tid FROM seen s
        WHERE s.due AND (s.upto <= $5 OR s.id = (SELECT first FROM due)) AND s.id NOT IN (SELECT id FROM stop)
          AND NOT EXISTS (SELECT 1 FROM (SELECT aggregate_id, min(id) AS first_id FROM stop WHERE NOT mine
                                         GROUP BY aggregate_id) b
                          WHERE b.aggregate_id = s.aggregate_id AND b.first_id < s.id))
    END)
RETURNING o.id, o.event_id, o.topic, o.aggregate_type, o.aggregate_id, o.event_type,
          o.content_type, o.payload, o.headers, o.created_at, o.attempts, o.xmin`

// ClaimArgs binds Claim.
type ClaimArgs struct {
	Owner  string        // $1: the claiming incarnation
	Limit  int           // $2: the most rows to claim
	Lease  time.Duration // $3: how long the claim holds them
	Shards []int16       // $4: the shards to claim from, passed as a ShardMask
	Bytes  int64         // $5: the most payload bytes to claim (at least one row is); 0: no bound
}

// Args returns Claim's parameters in order.
func (a ClaimArgs) Args() []any {
	bytes := a.Bytes
	if bytes <= 0 {
		bytes = math.MaxInt64
	}
	return []any{a.Owner, a.Limit, Interval(a.Lease), ShardMask(a.Shards), bytes}
}

// ClaimSettings runs first in the claim's transaction.
//
// Outbox statistics are often stale (a burst arrives after the table was
// analyzed nearly empty), and with a low row estimate the planner sorts every
// unpublished row to return a batch, which makes draining a backlog
// quadratic. Without sorts and bitmap scans it walks the claim index in id
// order and stops at the limit. Without sequential scans it reaches the
// rows to lock and update by their tuple ids: on a table never analyzed it
// would rather read the whole table and compare every row with the batch's
// tuple ids (30 ms for a 1,000-row claim on a 30,000-row table, 8 ms
// without).
//
// JIT is off: "seen" sorts at most twice Limit rows, which with sorts off
// costs the plan the planner's penalty for a sort, far above
// jit_above_cost, and compiling the claim took seconds.
//
// The claim runs on a generic plan (plan_cache_mode): its shape does not
// depend on the parameters, which the settings above pin, and planning the
// statement anew each time cost about 1 µs per claimed row.
//
// A claim that takes rows commits durably, with the server's
// synchronous_commit and at least 'local' (as SettleSettings), because
// nothing may be published before its row's commit is durable: a writer
// with synchronous_commit = off commits, and its row is visible to the
// claim, before its WAL is flushed. The claim's commit record comes after
// the writer's (the row was visible to the claim), so flushing it flushes
// the writer's too; a crash cannot then lose a row the relay published.
// A claim that takes nothing has no transaction id and writes no commit
// record, so polling an empty outbox flushes nothing; a claim of a batch
// costs one WAL flush, shared by its rows. (Were a claim lost in a crash
// anyway, its rows would return to their earlier state, which Claim
// treats as held by nobody: see the ordering rule above.)
//
// The timeouts bound the transaction on the server: a relay frozen or cut
// off inside it loses its session after Timeout, which releases its row
// locks, instead of holding them until TCP keepalive notices.
//
// The shared advisory lock is the claim gate (see OpsClaimGate): claims run
// side by side, but never while an operator's retry or replay commits. The
// claim's snapshot is taken in its next statement, after the gate, so it
// sees every such change committed before, and none commits until it ends.
// Without the gate, a retry committing while a claim runs would be missing
// from the claim's snapshot (the retried row still dead) but no longer hold
// the aggregate's later rows locked, and the claim would take them ahead of
// the retried row.
const ClaimSettings = `SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('enable_seqscan', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('jit', 'off', true),
       set_config('synchronous_commit',
           CASE current_setting('synchronous_commit') WHEN 'off' THEN 'local' ELSE current_setting('synchronous_commit') END, true),
       set_config('statement_timeout', $1, true), set_config('lock_timeout', $1, true),
       set_config('idle_in_transaction_session_timeout', $1, true),
       pg_advisory_xact_lock_shared(hashtext({{channel}} || '.claim'))`

// SettleSettings runs first in the transaction that records failures and
// releases. Those records take rows out of a relay's memory, so they must be
// durable before the relay acts on them: a lost release would leave a row
// claimed by the incarnation, which Claim would then treat as held in
// memory. The transaction commits with the server's synchronous_commit, and
// at least 'local' where the server's is 'off'. The timeouts are
// ClaimSettings'.
const SettleSettings = `SELECT set_config('synchronous_commit',
           CASE current_setting('synchronous_commit') WHEN 'off' THEN 'local' ELSE current_setting('synchronous_commit') END, true),
       set_config('statement_timeout', $1, true), set_config('lock_timeout', $1, true),
       set_config('idle_in_transaction_session_timeout', $1, true)`

// TimeoutArgs binds ClaimSettings and SettleSettings.
type TimeoutArgs struct {
	Timeout time.Duration // $1: statement, lock and idle-in-transaction timeout
}

// Args returns the settings' parameters.
func (a TimeoutArgs) Args() []any {
	return []any{strconv.FormatInt(max(a.Timeout.Milliseconds(), 1), 10) + "ms"}
}

// MarkUndecodable makes claimed rows the relay cannot turn into a message
// dead, with the reason, in the claim's transaction, so one bad row never
// blocks a claim. A dead row does not hold back its aggregate. $1 is a JSON
// array of {id, err}, $2 the claiming incarnation.
const MarkUndecodable = `
UPDATE {{table}} o
SET state = 'dead', attempts = o.attempts + 1, last_error = f.err,
    lease_owner = NULL, lease_expires_at = NULL
FROM jsonb_to_recordset($1::jsonb) AS f(id bigint, err text)
WHERE o.id = f.id AND o.state IN ('pending', 'claimed') AND o.lease_owner = $2`

// MarkUndecodableArgs binds MarkUndecodable.
type MarkUndecodableArgs struct {
	Rows  []RowError // $1
	Owner string     // $2
}

// RowError is a row id with the reason it failed.
type RowError struct {
	ID  int64  `json:"id"`
	Err string `json:"err"`
}

// Args returns MarkUndecodable's parameters.
func (a MarkUndecodableArgs) Args() ([]any, error) {
	js, err := json.Marshal(a.Rows)
	if err != nil {
		return nil, err
	}
	return []any{string(js), a.Owner}, nil
}

// ShardsInHandover returns which of Shards still hold rows claimed by
// another live incarnation under a valid lease among the first Window
// unpublished rows of those shards in id order: the rows a claim of the new
// owner would walk first, which the shard's previous owner is still
// publishing. Claim alone keeps order; this only keeps a new owner from
// filling its batches with candidates Claim would drop while the previous
// owner finishes. It reads Window entries of the claim index at most,
// whatever the backlog, in id order (run it after WalkSettings, so no plan
// sorts the backlog instead), and nothing at all (a one-time filter) while
// the incarnation is the only live one, as a lone relay starting on a
// backlog is.
const ShardsInHandover = `
SELECT DISTINCT w.shard FROM (
    SELECT o.shard, o.lease_owner, o.lease_expires_at
    FROM {{table}} o
    WHERE o.state IN ('pending', 'claimed') AND get_bit($2::varbit, o.shard) = 1
      AND EXISTS (SELECT 1 FROM {{relays}} WHERE id <> $1)
    ORDER BY o.id
    LIMIT $3
) w
WHERE w.lease_owner IS NOT NULL AND w.lease_owner <> $1 AND w.lease_expires_at > now()
  AND w.lease_owner IN (SELECT id FROM {{relays}})`

// HandoverArgs binds ShardsInHandover.
type HandoverArgs struct {
	Owner  string  // $1: the incarnation
	Shards []int16 // $2: the shards to check, passed as a ShardMask
	Window int     // $3: how many unpublished rows to look at, a claim's batch
}

// Args returns the parameters in order.
func (a HandoverArgs) Args() []any { return []any{a.Owner, ShardMask(a.Shards), a.Window} }

// WalkSettings runs first in the transaction of a statement that walks an
// index in order up to a limit (ShardsInHandover): with stale statistics
// the planner would rather read and sort every row the index holds. See
// ClaimSettings. $1 is the statement timeout.
const WalkSettings = `SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('enable_seqscan', 'off', true), set_config('statement_timeout', $1, true)`

// ShardsArgs binds ReleaseShards and AcquireShards.
type ShardsArgs struct {
	Owner  string  // $1: the incarnation
	Shards []int16 // $2
}

// Args returns the parameters in order.
func (a ShardsArgs) Args() []any { return []any{a.Owner, Int16Array(a.Shards)} }

// MarkPublished records broker acknowledgements for the rows IDs that Owner
// still holds under the claim Version. A row taken over by another
// incarnation meanwhile is left to it (it publishes the row again: at
// least once), and so is a row an operator returned to pending (a replay),
// which a late mark must not undo, even once the same incarnation has
// claimed it again.
//
// Version is the claim's transaction id, which Claim returns as each row's
// xmin: any later change of the row (a mark, a release, a replay, another
// claim) makes a new version with another xmin, so an acknowledgement
// marks only the version its claim took. A VACUUM FREEZE between claim and
// mark does not change that: freezing sets a flag in the tuple's header and
// keeps its xmin, which the xmin column still reads (PostgreSQL 9.4 and
// later). Marks are grouped by claim, one statement each; a mark usually
// covers one or two.
//
// The rows are reached through an index on id, not by the tuple ids their
// claim returned. A mark is not heap-only (it takes the row out of the
// claim index), so its new version needs room, and an index fetch prunes
// the page it reads (removing the versions the claims left dead), where a
// fetch by tuple id does not. Marking by tuple id, the new versions found
// no room on the claimed pages and went to new ones: the table grew twice
// as large, and a mark cost about 1.7 µs more per row (6.5 against 4.8 µs
// for batches of 1,000, measured by the backend's CPU time).
//
// The statement runs as its own transaction and turns off synchronous
// commit for it in the same round trip (the setting is read at commit): a
// lost mark only republishes what the broker has.
const MarkPublished = `
WITH async AS (SELECT set_config('synchronous_commit', 'off', true))
UPDATE {{table}} o
SET state = 'published', published_at = now(), lease_owner = NULL, lease_expires_at = NULL
WHERE o.id = ANY($1::bigint[]) AND o.lease_owner = $2 AND o.xmin = $3::text::xid
  AND o.state IN ('pending', 'claimed')
  AND EXISTS (SELECT 1 FROM async)`

// MarkArgs binds MarkPublished.
type MarkArgs struct {
	IDs     []int64 // $1
	Owner   string  // $2: the incarnation that claimed them
	Version uint32  // $3: the claim's transaction id, the rows' xmin as Claim returned it
}

// Args returns the parameters in order.
func (a MarkArgs) Args() []any {
	return []any{Int64Array(a.IDs), a.Owner, strconv.FormatUint(uint64(a.Version), 10)}
}

// RowsArgs binds Release.
type RowsArgs struct {
	IDs   []int64 // $1
	Owner string  // $2: the incarnation that claimed them
}

// Args returns the parameters in order.
func (a RowsArgs) Args() []any { return []any{Int64Array(a.IDs), a.Owner} }

// Fail records failed publishes. Every failure counts in attempts, but
// only a permanent one (the event's own fault) makes a row that reached
// MaxAttempts dead: a failure in an outage never does. retry_at (see
// Claim) is the backoff's end, as next_attempt_at is until the row is
// claimed again.
const Fail = `
UPDATE {{table}} o
SET attempts = o.attempts + 1,
    state = CASE WHEN f.permanent AND o.attempts + 1 >= $2 THEN 'dead' ELSE 'pending' END,
    next_attempt_at = now() + f.delay_ms * interval '1 millisecond',
    retry_at = now() + f.delay_ms * interval '1 millisecond',
    last_error = f.err,
    lease_owner = NULL,
    lease_expires_at = NULL
FROM jsonb_to_recordset($1::jsonb) AS f(id bigint, owner text, err text, permanent boolean, delay_ms bigint)
WHERE o.id = f.id AND o.state IN ('pending', 'claimed') AND o.lease_owner = f.owner
RETURNING o.id, o.state`

// FailArgs binds Fail.
type FailArgs struct {
	Failures    []Failure // $1
	MaxAttempts int       // $2
}

// Failure is one failed publish.
type Failure struct {
	ID        int64  `json:"id"`
	Owner     string `json:"owner"` // the incarnation that claimed it
	Err       string `json:"err"`
	Permanent bool   `json:"permanent"` // the event's own fault: it may make the row dead
	DelayMS   int64  `json:"delay_ms"`
}

// Args returns Fail's parameters.
func (a FailArgs) Args() ([]any, error) {
	js, err := json.Marshal(a.Failures)
	if err != nil {
		return nil, err
	}
	return []any{string(js), a.MaxAttempts}, nil
}

// Release returns claimed rows the relay will not publish (shutdown, held
// back behind a failed row of their aggregate, or from a claim whose commit
// was not confirmed) to pending, due at once (Claim moved next_attempt_at to
// the lease's end), with their attempts unchanged. Binds RowsArgs.
const Release = `
UPDATE {{table}}
SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL, next_attempt_at = now()
WHERE id = ANY($1::bigint[]) AND state IN ('pending', 'claimed') AND lease_owner = $2`

// RebalancePayload is the NOTIFY payload that asks relays to rebalance now
// (a relay joined, or gave up shards); writers' notifications carry none.
const RebalancePayload = "rebalance"

// NotifyRebalance asks every listening relay of the table to rebalance now.
const NotifyRebalance = `SELECT pg_notify({{channel}}, 'rebalance')`

// Register records a new incarnation ($1 id, $2 name, $3 host).
const Register = `INSERT INTO {{relays}} (id, name, host) VALUES ($1, $2, $3)`

// RegisterArgs binds Register.
type RegisterArgs struct {
	Owner, Name, Host string
}

// Args returns Register's parameters.
func (a RegisterArgs) Args() []any { return []any{a.Owner, a.Name, a.Host} }

// ReplacePredecessors deletes the other incarnations of name $1 (an earlier
// run of a relay restarted under the same id), so their shards and claims
// are taken over at once instead of after StaleAfter. Relay ids must be
// unique among running relays for this to be right; see Config.ID.
const ReplacePredecessors = `DELETE FROM {{relays}} WHERE name = $1 AND id <> $2 RETURNING id`

// ReplaceArgs binds ReplacePredecessors.
type ReplaceArgs struct {
	Name, Owner string
}

// Args returns ReplacePredecessors' parameters.
func (a ReplaceArgs) Args() []any { return []any{a.Name, a.Owner} }

// OtherIncarnations counts the live incarnations of name $1 other than those
// in $2: heartbeats younger than $3. A relay whose incarnation was replaced
// by one of the same name (a second process running under the same id, or a
// restart while this one was cut off) stands by while that one is live,
// instead of replacing it back; a stale one it replaces.
const OtherIncarnations = `SELECT count(*) FROM {{relays}}
WHERE name = $1 AND id <> ALL($2::text[]) AND heartbeat_at >= now() - $3::interval`

// OtherIncarnationsArgs binds OtherIncarnations.
type OtherIncarnationsArgs struct {
	Name       string
	Own        []string // this relay's incarnations, ended or unconfirmed
	StaleAfter time.Duration
}

// Args returns OtherIncarnations' parameters.
func (a OtherIncarnationsArgs) Args() []any {
	return []any{a.Name, TextArray(a.Own), Interval(a.StaleAfter)}
}

// Heartbeat refreshes an incarnation's row ($1). It changes no row when the
// incarnation was declared dead (or replaced): the relay then drops what it
// holds and registers anew.
const Heartbeat = `UPDATE {{relays}} SET heartbeat_at = now() WHERE id = $1`

// ForgetStaleRelays deletes relays whose heartbeat is older than $1. Their
// shards become free and their claims can be taken over.
//
// A row another transaction holds locked is skipped, not waited for: a peer
// frozen while deleting it, or registering in its place, must not stop
// every relay's heartbeat round.
const ForgetStaleRelays = `
DELETE FROM {{relays}} WHERE id IN (
    SELECT id FROM {{relays}} WHERE heartbeat_at < now() - $1::interval
    FOR UPDATE SKIP LOCKED)
RETURNING id`

// LiveRelays lists the live incarnations with the name shards are assigned
// by (the id for rows registered before schema version 2).
const LiveRelays = `SELECT id, CASE WHEN name = '' THEN id ELSE name END FROM {{relays}} ORDER BY id`

// ReleaseShards gives up the incarnation's shards that are not in $2.
// Binds ShardsArgs.
const ReleaseShards = `
UPDATE {{shards}} SET owner = NULL, updated_at = now()
WHERE owner = $1 AND shard <> ALL($2::smallint[])`

// AcquireShards takes the shards in $2 that are free or owned by an
// incarnation that is gone, and returns the shards $1 owns afterwards.
// Binds ShardsArgs.
const AcquireShards = `
WITH taken AS (
    UPDATE {{shards}} SET owner = $1, updated_at = now()
    WHERE shard = ANY($2::smallint[])
      AND (owner IS NULL OR owner NOT IN (SELECT id FROM {{relays}}))
    RETURNING shard
)
SELECT shard FROM taken
UNION
SELECT shard FROM {{shards}} WHERE owner = $1`

// LeaveShards releases every shard of the incarnation $1, so peers take
// over at once on a clean shutdown.
const LeaveShards = `UPDATE {{shards}} SET owner = NULL, updated_at = now() WHERE owner = $1`

// LeaveRelay deletes the incarnation's heartbeat row ($1).
const LeaveRelay = `DELETE FROM {{relays}} WHERE id = $1`

// Prune deletes up to $2 published rows older than $1, oldest first. It
// reads them on the prune index (schema version 5), which holds published
// rows only, in published_at order: the range it reads is the batch, however
// many dead or unpublished rows come first in the primary key and however
// many published rows are retained. It deletes them by their tuple ids, so
// no plan can join the batch to the whole table; the outer condition is
// checked again on a row changed meanwhile (an operator's replay holds
// PruneLock, so that takes another writer).
const Prune = `
DELETE FROM {{table}}
WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM {{table}}
    WHERE state = 'published' AND published_at < now() - $1::interval
    ORDER BY published_at
    LIMIT $2))
  AND state = 'published' AND published_at < now() - $1::interval`

// PruneArgs binds Prune.
type PruneArgs struct {
	Retention time.Duration // $1: published rows older than this go
	Batch     int           // $2: the most rows one statement deletes
}

// Args returns Prune's parameters in order.
func (a PruneArgs) Args() []any { return []any{Interval(a.Retention), a.Batch} }

// PruneLock is taken (pg_try_advisory_xact_lock) so one relay prunes at a time.
const PruneLock = `SELECT pg_try_advisory_xact_lock(hashtext({{channel}} || '.prune'))`

// Stats summarises the outbox for health checks: backlog (pending and
// claimed rows, BacklogCount), the creation time of the oldest of them
// (OldestUnpublished) and dead rows (DeadCount), counted up to $1 (a
// CountArgs) and estimated beyond it.
const Stats = `
SELECT
    ` + BacklogCount + `,
    ` + OldestUnpublished + `,
    ` + DeadCount + `,
    now()`

// CountCap is how many rows the stats count one by one (CountArgs.Cap):
// a count reads an index entry of each row it counts, and the row too
// where its page changed since the last vacuum, 0.4–0.8 µs of server CPU
// a row. Up to it the counts are exact; beyond it they are estimates
// (BacklogCount, DeadCount), so no stats reading costs more than CountCap
// index entries however large the backlog or the dead letters grow.
const CountCap = 100_000

// Counts are the totals shown, derived from the readings of BacklogCount,
// DeadCount and ScheduledCount at CountCap, in one place for every
// reader (txoutbox.ReadStats, outboxadmin's snapshot, the relay's
// gauges): the backlog shown leaves the scheduled rows out, and is an
// estimate when either of its terms is.
type Counts struct {
	Backlog, Dead, Scheduled                            int64
	BacklogEstimated, DeadEstimated, ScheduledEstimated bool
}

// CountsOf derives Counts from the unpublished, dead and scheduled rows
// read.
func CountsOf(unpublished, dead, scheduled int64) Counts {
	c := Counts{Backlog: max(unpublished-scheduled, 0), Dead: dead, Scheduled: scheduled,
		DeadEstimated: dead >= CountCap, ScheduledEstimated: scheduled >= CountCap}
	c.BacklogEstimated = unpublished >= CountCap || c.ScheduledEstimated
	return c
}

// TopicCountCap is how many rows of each topic the per-topic stats count
// (TopicStats): beyond it a topic's figure is a lower bound.
const TopicCountCap = 10_000

// CountArgs binds Stats, StatsBacklog, StatsDead, OpsSnapshot and
// TopicStats.
type CountArgs struct {
	Cap int // $1: the most rows counted one by one (CountCap, TopicCountCap)
}

// Args returns the parameters in order.
func (a CountArgs) Args() []any { return []any{a.Cap} }

// BacklogCount is the number of unpublished rows, exact below $1: it
// counts the first $1 entries of the claim index. From $1 on it is an
// estimate: $1 plus the rest of the id range, from the $1-th row's id to
// the highest unpublished id (the claim index's last entry), at the
// density of unpublished rows among the ids of the first $1. A backlog is
// the rows written since the relays fell behind, in id order, so the range
// holds few others, and rows of shards held back (unpublished among
// published ones) show in the density; a block of rows published or dead
// in the middle of the range counts as unpublished. It is live (it follows
// a drain as it goes) and costs $1 entries and one more descent, whatever
// the backlog.
const BacklogCount = `(SELECT CASE WHEN h.n < $1 THEN h.n
        ELSE h.n + coalesce(((SELECT max(id) FROM {{table}} WHERE state IN ('pending', 'claimed')) - h.last)::float8
            * h.n / (h.last - h.first + 1), 0)::bigint END
    FROM (SELECT count(*) AS n, min(id) AS first, max(id) AS last FROM (
        SELECT id FROM {{table}} WHERE state IN ('pending', 'claimed') ORDER BY id LIMIT $1) s) h)`

// DeadCount is the number of dead rows, exact below $1 (it counts $1
// entries of a dead-letter index at most). From $1 on it is the planner's
// statistics: the dead-letter indexes' row count as of the table's last
// VACUUM or ANALYZE (autovacuum keeps it within about a tenth of the
// table's changes), never below $1. Dead letters change slowly, and
// ids cannot tell them apart from the published rows written among them.
const DeadCount = `(SELECT CASE WHEN h.n < $1 THEN h.n
        ELSE greatest(h.n, (SELECT max(c.reltuples)::bigint FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid = '{{table}}'::regclass AND pg_get_expr(i.indpred, i.indrelid) = '(state = ''dead''::text)')) END
    FROM (SELECT count(*) AS n FROM (SELECT 1 FROM {{table}} WHERE state = 'dead' LIMIT $1) s) h)`

// OldestUnpublished is the lag's one definition, everywhere it is shown
// (relay metrics, outbox status, the console's totals and its topics): the
// earliest time an unpublished row became due, its created_at or, for a
// row written with a later not_before, that (greatest ignores a NULL). A
// row scheduled for later is not lag: while only such rows wait, the time
// is in the future and the lag, clamped, is zero. created_at need not
// follow id order (an application may set it, clocks skew), so the row
// with the lowest id is not it. The due index (schema version 7, which
// replaced version 4's lag index on created_at) serves it with one entry;
// without it, it reads the claim index whole.
const OldestUnpublished = `(SELECT min(greatest(created_at, not_before)) FROM {{table}} WHERE state IN ('pending', 'claimed'))`

// ScheduledCount counts the scheduled rows: unpublished, with a not_before
// still to come (Event.NotBefore), exactly up to $1 (CountArgs), and from
// $1 on from the planner's statistics of the scheduled index (as
// DeadCount), never below $1. They are part of what StatsBacklog and OpsSnapshot
// count, and not of the backlog shown: readers subtract it. It reads the
// scheduled index (schema version 7) from now on, $1 entries at most, and
// nothing of the rest of the backlog. A scalar subquery, so readers add it
// as a column beside the counts they run.
const ScheduledCount = `(SELECT CASE WHEN h.n < $1 THEN h.n
        ELSE greatest(h.n, (SELECT max(c.reltuples)::bigint FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid = '{{table}}'::regclass AND pg_get_expr(i.indpred, i.indrelid) LIKE '%not_before IS NOT NULL%')) END
    FROM (SELECT count(*) AS n FROM (SELECT 1 FROM {{table}} WHERE state IN ('pending', 'claimed') AND not_before > now() LIMIT $1) s) h)`

// NextScheduled is when the next scheduled row is due, NULL when none is:
// one entry of the scheduled index.
const NextScheduled = `(SELECT min(not_before) FROM {{table}} WHERE state IN ('pending', 'claimed') AND not_before > now())`

// StatsLag, StatsBacklog and StatsDead are Stats's three parts, which a
// relay reads apart (see relay.Config's StatsInterval).
//
// StatsLag is the creation time of the oldest unpublished row
// (OldestUnpublished) and the database clock.
const StatsLag = `
SELECT ` + OldestUnpublished + `, now()`

// StatsBacklog is BacklogCount: exact up to $1 (CountArgs), estimated
// beyond.
const StatsBacklog = `SELECT ` + BacklogCount

// StatsDead is DeadCount: exact up to $1 (CountArgs), estimated beyond.
const StatsDead = `SELECT ` + DeadCount

// TopicStats is Stats per topic: each topic's due unpublished rows
// counted up to $1 (CountArgs), how long the oldest of them has been due,
// its dead rows counted up to $1, and its scheduled rows (a not_before
// still to come) among the first $1; a count of $1 means at least $1. It
// finds the topics by a loose scan of the topic indexes, one descent per
// topic to the next one, and reads for each the first $1 entries from the
// topic on in (topic, due time) order (schema version 7's
// outbox_topic_due_idx) or (topic, id) order (dead rows, version 6),
// counting those of the topic: the due rows come first, then the
// scheduled ones, so a topic's lag is its first entry and its backlog is
// not hidden behind its scheduled rows. Ordering by topic leaves the
// planner no index but the topic indexes (an index on the time or id
// filtered by topic would read every row ahead of a rare topic's). So it
// reads, per topic, $1 entries at most, however large the backlog and the
// dead letters: its cost grows with the number of topics, not of rows.
const TopicStats = `
WITH RECURSIVE b(topic) AS (
    (SELECT topic FROM {{table}} WHERE state IN ('pending', 'claimed') ORDER BY topic LIMIT 1)
    UNION ALL
    SELECT (SELECT o.topic FROM {{table}} o WHERE o.state IN ('pending', 'claimed') AND o.topic > b.topic
            ORDER BY o.topic LIMIT 1)
    FROM b WHERE b.topic IS NOT NULL
), d(topic) AS (
    (SELECT topic FROM {{table}} WHERE state = 'dead' ORDER BY topic LIMIT 1)
    UNION ALL
    SELECT (SELECT o.topic FROM {{table}} o WHERE o.state = 'dead' AND o.topic > d.topic ORDER BY o.topic LIMIT 1)
    FROM d WHERE d.topic IS NOT NULL
)
SELECT topic, sum(backlog)::bigint, extract(epoch FROM now() - min(oldest))::float8, sum(dead)::bigint, sum(scheduled)::bigint
FROM (
    SELECT b.topic, x.backlog, x.oldest, 0 AS dead, x.scheduled
    FROM b, LATERAL (
        SELECT count(*) FILTER (WHERE w.topic = b.topic AND w.due <= now()) AS backlog,
               min(w.due) FILTER (WHERE w.topic = b.topic AND w.due <= now()) AS oldest,
               count(*) FILTER (WHERE w.topic = b.topic AND w.due > now()) AS scheduled
        FROM (SELECT o.topic, greatest(o.created_at, o.not_before) AS due FROM {{table}} o
              WHERE o.state IN ('pending', 'claimed') AND o.topic >= b.topic
              ORDER BY o.topic, greatest(o.created_at, o.not_before) LIMIT $1) w) x
    WHERE b.topic IS NOT NULL
    UNION ALL
    SELECT d.topic, 0, NULL, x.dead, 0
    FROM d, LATERAL (
        SELECT count(*) FILTER (WHERE w.topic = d.topic) AS dead
        FROM (SELECT o.topic FROM {{table}} o
              WHERE o.state = 'dead' AND o.topic >= d.topic
              ORDER BY o.topic, o.id LIMIT $1) w) x
    WHERE d.topic IS NOT NULL
) s
GROUP BY topic
ORDER BY topic`
