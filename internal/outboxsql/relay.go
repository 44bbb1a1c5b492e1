package outboxsql

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
)

// Relay statements. Each statement that takes parameters has an Args type
// beside it that binds them in order, so no statement is called with
// positional values chosen far from its text. Id and shard lists are passed
// as array literals ('{1,2,3}') and per-row values as a JSON document, so the
// statements work with any database/sql driver. Ordering rests on one rule
// that Claim enforces in the database (see Claim and claim.md).

// Claim takes up to Limit due rows of the shards in Shards for Owner (a
// relay incarnation), under a lease of Lease, and returns them, in one
// statement in a short transaction (see ClaimSettings).
//
// Invariant: a row is claimed only if every earlier unpublished row of its
// aggregate is held by Owner (in memory, or acknowledged) or taken by the
// same claim; package relay's documentation says why that keeps first
// deliveries in order. Its cost is bounded by Limit, however many rows wait
// in backoff or are scheduled: first attempts and retries are read apart,
// on indexes that leave the rows in backoff out; first attempts from the
// claim floor (ClaimFloor) on, so not over the index entries of the rows
// published since the last VACUUM. On a partitioned outbox, Low (from
// ClaimLow) lets PostgreSQL leave the drained partitions out when the
// statement starts, instead of locking, opening and closing each of them in
// every part of the claim; a Low that no longer holds in the claim's
// snapshot makes the claim take nothing. The reasoning behind each CTE is
// in claim.md beside this file.
const Claim = `
WITH live AS MATERIALIZED (
    SELECT id FROM {{relays}}
    WHERE ($6::bigint = 0
           OR ((` + ClaimFloorRead + `) >= $6::bigint
               AND (SELECT 1 FROM {{table}} v
                    WHERE v.state IN ('pending', 'claimed') AND v.retry_at > '-infinity' AND v.id < $6::bigint
                    ORDER BY v.retry_at LIMIT 1) IS NULL))
), retry AS MATERIALIZED (
    SELECT o.ctid AS tid, o.id, o.aggregate_id, o.lease_owner, o.lease_expires_at, o.next_attempt_at,
           octet_length(o.payload) AS bytes
    FROM {{table}} o
    WHERE o.state IN ('pending', 'claimed') AND o.retry_at > '-infinity' AND o.retry_at <= now() AND o.id >= $6::bigint
      AND get_bit($4::varbit, o.shard) = 1
      AND (o.lease_owner IS DISTINCT FROM $1 OR o.lease_expires_at <= now())
      AND NOT EXISTS (SELECT 1 FROM {{table}} h
                      WHERE h.aggregate_id = o.aggregate_id AND h.id < o.id AND h.id >= $6::bigint
                        AND h.state IN ('pending', 'claimed') AND h.retry_at > now())
      AND EXISTS (SELECT 1 FROM live WHERE id = $1)
    ORDER BY o.retry_at
    LIMIT $2
), fresh AS MATERIALIZED (
    SELECT o.ctid AS tid, o.id, o.aggregate_id, o.lease_owner, o.lease_expires_at, o.next_attempt_at,
           octet_length(o.payload) AS bytes
    FROM {{table}} o
    WHERE o.state IN ('pending', 'claimed') AND o.retry_at = '-infinity'
      AND o.id >= (` + ClaimFloorRead + `) AND o.id >= $6::bigint
      AND get_bit($4::varbit, o.shard) = 1
      AND (o.lease_owner IS DISTINCT FROM $1 OR o.lease_expires_at <= now())
      AND (NOT (SELECT EXISTS (SELECT 1 FROM {{table}} WHERE state IN ('pending', 'claimed') AND retry_at > '-infinity' AND id >= $6::bigint))
        OR (SELECT true FROM {{table}} b
            WHERE b.aggregate_id = o.aggregate_id AND b.id < o.id AND b.id >= $6::bigint
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
                WHERE x.aggregate_id = r.aggregate_id AND x.id < r.id AND x.id >= $6::bigint AND x.state IN ('pending', 'claimed')
                  AND (x.lease_owner IS DISTINCT FROM $1 OR x.lease_expires_at <= now())
                  AND x.id NOT IN (SELECT id FROM fresh) AND x.id NOT IN (SELECT id FROM retry)
                LIMIT 1) IS NOT NULL
        FROM retry r
    ) c
    ORDER BY c.id
    LIMIT $2
), due AS MATERIALIZED (
    SELECT s.tid, s.id, s.aggregate_id FROM seen s
    WHERE s.due AND (s.upto <= $5 OR s.id = (SELECT min(id) FROM seen WHERE due))
), took AS MATERIALIZED (
    SELECT o.id
    FROM due d JOIN {{table}} o ON o.ctid = d.tid AND o.id = d.id AND o.id >= $6::bigint
    WHERE o.state NOT IN ('published', 'dead')
      AND ((o.lease_owner IS NULL AND o.next_attempt_at <= now())
        OR (o.lease_owner IS NOT NULL AND (o.lease_expires_at <= now()
            OR o.lease_owner NOT IN (SELECT id FROM live))))
    FOR UPDATE OF o SKIP LOCKED
), stop AS MATERIALIZED (
    SELECT s.id, s.aggregate_id, s.mine FROM seen s
    WHERE NOT s.due
       OR (s.due AND (SELECT count(*) FROM took) < (SELECT count(*) FROM due)
           AND s.id NOT IN (SELECT id FROM took))
), pick AS MATERIALIZED (
    SELECT d.tid, d.id FROM due d
    WHERE NOT EXISTS (SELECT 1 FROM stop)
       OR (d.id NOT IN (SELECT id FROM stop)
           AND NOT EXISTS (SELECT 1 FROM (SELECT aggregate_id, min(id) AS first_id FROM stop WHERE NOT mine
                                          GROUP BY aggregate_id) b
                           WHERE b.aggregate_id = d.aggregate_id AND b.first_id < d.id))
)
UPDATE {{table}} o
SET lease_owner = $1, lease_expires_at = now() + $3::interval, next_attempt_at = now() + $3::interval
FROM pick p
WHERE o.ctid = p.tid AND o.id = p.id AND o.id >= $6::bigint
RETURNING o.id, o.event_id, o.topic, o.aggregate_type, o.aggregate_id, o.event_type,
          o.content_type, o.payload, o.headers, o.created_at, o.attempts, o.xmin`

// ClaimArgs binds Claim.
type ClaimArgs struct {
	Owner  string        // $1: the claiming incarnation
	Limit  int           // $2: the most rows to claim
	Lease  time.Duration // $3: how long the claim holds them
	Shards []int16       // $4: the shards to claim from, passed as a ShardMask
	Bytes  int64         // $5: the most payload bytes to claim (at least one row is); 0: no bound
	Low    int64         // $6: the lowest id to read (ClaimLow); 0: every id
}

// Args returns Claim's parameters in order.
func (a ClaimArgs) Args() []any {
	bytes := a.Bytes
	if bytes <= 0 {
		bytes = math.MaxInt64
	}
	return []any{a.Owner, a.Limit, Interval(a.Lease), ShardMask(a.Shards), bytes, max(a.Low, 0)}
}

// ClaimSettings runs first in the claim's transaction. It pins the plan
// (no sorts, bitmap or sequential scans, no JIT, a generic plan), since
// stale statistics would have the planner sort the whole backlog; commits
// durably (synchronous_commit at least 'local'), since nothing may be
// published before its row's commit is durable; bounds the transaction on
// the server (the timeouts); and takes the claim gate shared (OpsClaimGate),
// so no operator's retry or replay commits while a claim runs. See
// claim.md for why each is needed. The gate's key is OpsClaimGate's, of
// the table named by a parameter ({{claimkey $4}}): one statement for
// every table, so a connection that claims for many tables (a Group's
// claim connections) keeps one prepared statement for it, not one each.
const ClaimSettings = `SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('enable_seqscan', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('jit', 'off', true),
       set_config('synchronous_commit',
           CASE current_setting('synchronous_commit') WHEN 'off' THEN 'local' ELSE current_setting('synchronous_commit') END, true),
       set_config('statement_timeout', $1, true), set_config('idle_in_transaction_session_timeout', $2, true),
       set_config('lock_timeout', $3, true),
       pg_advisory_xact_lock_shared({{claimkey $4}})`

// LockProbe is what a relay runs, in a transaction it rolls back, while
// its table is locked out (a statement on it gave up on a lock after
// relay.Config.LockTimeout): it takes at once the lock the relay's writes
// take on the table (every partition) and its companions, ROW EXCLUSIVE,
// or fails with SQLSTATE 55P03 (lock_not_available) while another session
// holds or waits for one that conflicts: SHARE or stronger, as ALTER
// TABLE, VACUUM FULL, CREATE INDEX, TRUNCATE and LOCK TABLE take. The
// relay's writers' own locks never conflict with it. LockProbeGates
// follows it.
const LockProbe = `LOCK TABLE {{table}}, {{relays}}, {{shards}}, {{floor}} IN ROW EXCLUSIVE MODE NOWAIT`

// LockProbeGates follows LockProbe in its transaction: whether the claim
// gate (ClaimSettings) and the WAL gate (OpsWALGate) can be taken shared
// now, false while an operator's retry or replay, or a WAL relay making
// its slot, holds one. $1 is the table's quoted name (Names.Table).
const LockProbeGates = `SELECT pg_try_advisory_xact_lock_shared({{claimkey}}) AND pg_try_advisory_xact_lock_shared(` + walGateKey + `)`

// ClaimLow finds a Low for Claim on a partitioned outbox: the lower bound
// of the first range partition that may hold an unpublished row, one that
// holds a retry (a row in backoff, a scheduled row) or reaches past the
// claim floor (ClaimFloorRead: first attempts are all at or above it). It
// is rendered by RenderClaimLow over the range partitions wholly below the
// floor, each probed by name (one entry of its retry index, under
// WalkSettings), so it locks neither the parent nor the default partition,
// which creating a partition locks ACCESS EXCLUSIVE. It returns NULL when
// none of them holds a retry. Claim checks Low again in its own snapshot:
// only an operator's retry or replay (which lowers the floor) makes rows
// unpublished below the floor.
const ClaimLow = `SELECT {{from}}::bigint WHERE EXISTS (
    SELECT 1 FROM {{partition}} WHERE state IN ('pending', 'claimed') AND retry_at > '-infinity')`

// ClaimFloorRead reads the claim floor; Claim reads it the same way.
const ClaimFloorRead = `SELECT coalesce(max(floor), 0) FROM {{floor}}`

// RenderClaimLow renders ClaimLow for the range partitions parts (each
// one's Partition and From), in one statement.
func RenderClaimLow(n Names, parts []PartitionVars) string {
	probes := make([]string, len(parts))
	for i, p := range parts {
		probes[i] = RenderPartition(n, ClaimLow, p)
	}
	return "SELECT min(lo) FROM (" + strings.Join(probes, "\nUNION ALL\n") + ") l(lo)"
}

// SettleSettings runs first in the transaction that records failures and
// releases. Those records take rows out of a relay's memory, so they must be
// durable before the relay acts on them: a lost release would leave a row
// claimed by the incarnation, which Claim would then treat as held in
// memory. The transaction commits with the server's synchronous_commit, and
// at least 'local' where the server's is 'off'. The timeouts are
// ClaimSettings'.
const SettleSettings = `SELECT set_config('synchronous_commit',
           CASE current_setting('synchronous_commit') WHEN 'off' THEN 'local' ELSE current_setting('synchronous_commit') END, true),
       set_config('statement_timeout', $1, true), set_config('idle_in_transaction_session_timeout', $2, true),
       set_config('lock_timeout', $3, true)`

// TxTimeouts runs first in the transaction of each other statement a relay
// runs on its table and companions (heartbeats, shard moves, marks, claim
// floor rounds, stats readings): the timeouts of ClaimSettings and
// SettleSettings alone. The statement after it is parsed in the
// transaction, so the lock its parse takes waits Lock at most too: outside
// a transaction that lock would wait for as long as another session holds
// it (see relay.Config.LockTimeout).
const TxTimeouts = `SELECT set_config('statement_timeout', $1, true), set_config('idle_in_transaction_session_timeout', $2, true),
       set_config('lock_timeout', $3, true)`

// SessionLockTimeout sets the lock timeout of a session ($1, a
// TimeoutArgs) for good: a relay group sets it on the claim connections
// it keeps out of the pool (never given back to it), so that preparing
// the claim, which pgx does before the claim's transaction begins, waits
// for a lock no longer than the claim itself.
const SessionLockTimeout = `SELECT set_config('lock_timeout', $1, false)`

// ClaimSettingsArgs binds ClaimSettings.
type ClaimSettingsArgs struct {
	TxTimeoutArgs        // $1, $2, $3
	Table         string // $4: the table, as Names.Table spells it
}

// Args returns the settings' parameters.
func (a ClaimSettingsArgs) Args() []any { return append(a.TxTimeoutArgs.Args(), a.Table) }

// TxTimeoutArgs binds SettleSettings, TxTimeouts, WalkSettings, and
// ClaimSettings' timeouts.
type TxTimeoutArgs struct {
	// Wait is the statement timeout ($1), set short of the client's
	// deadline so the server ends a statement before the client abandons
	// its connection.
	Wait time.Duration
	// Idle is the idle-in-transaction timeout ($2): it frees the locks of
	// a client frozen inside the transaction. Not shortened like Wait: a
	// live client's own deadline bounds it, and the time between
	// statements (the claim's rows read, then COMMIT) counts against it.
	Idle time.Duration
	// Lock is the lock timeout ($3): how long a statement waits for a
	// lock another session holds before it fails with SQLSTATE 55P03
	// (lock_not_available). 0 takes Wait. A Lock not well short of Wait
	// is cut to three quarters of it, so that a statement waiting on a
	// lock fails as a lock timeout, which the relay acts on, rather than
	// a statement timeout: the wait starts after the statement does.
	Lock time.Duration
}

// Args returns the settings' parameters.
func (a TxTimeoutArgs) Args() []any {
	lock := a.Lock
	if lock <= 0 {
		lock = a.Wait
	} else if most := a.Wait * 3 / 4; lock > most {
		lock = most
	}
	return []any{millis(a.Wait), millis(a.Idle), millis(lock)}
}

// TimeoutArgs binds the settings of one timeout: SessionLockTimeout,
// OpsTimeouts, WALTakeoverTimeout.
type TimeoutArgs struct {
	Timeout time.Duration // $1
}

// Args returns the settings' parameters.
func (a TimeoutArgs) Args() []any { return []any{millis(a.Timeout)} }

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
// index in order up to a limit (ShardsInHandover, RepairRetryAt, ClaimLow):
// with stale statistics the planner would rather read and sort every row
// the index holds. JIT is off, as for the claim: a scan the settings price
// out (the claim floor's one row, read whole) puts the plan's cost far
// above jit_above_cost, where compiling costs far more than the run. See
// ClaimSettings. Its timeouts are TxTimeouts'; binds TxTimeoutArgs.
const WalkSettings = `SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true), set_config('statement_timeout', $1, true),
       set_config('idle_in_transaction_session_timeout', $2, true), set_config('lock_timeout', $3, true)`

// ShardsArgs binds ReleaseShards and AcquireShards.
type ShardsArgs struct {
	Owner  string  // $1: the incarnation
	Shards []int16 // $2
}

// Args returns the parameters in order.
func (a ShardsArgs) Args() []any { return []any{a.Owner, Int16Array(a.Shards)} }

// The claim floor (schema version 8) is an id below which no row can be a
// first attempt again, so the claim walks the first attempts from it.
// Ids are taken before commit, so a lower id may still commit after a
// higher one was published: a relay raises the floor only by a proof.
//
//  1. ClaimFloorStart notes the highest id H, the first unassigned
//     transaction id X, and the virtual transaction ids V of every other
//     transaction running (one that has taken a row id but not yet a
//     transaction id has a virtual one).
//  2. ClaimFloorPassed holds once every transaction below X and every one
//     in V has ended: every id up to H has committed or never will.
//  3. ClaimFloorRaise sets the floor to the lowest first attempt from the
//     floor on, or H+1 if lower, if no operator or relay changed it since
//     step 1 (its generation).
//
// Only an insert makes a first attempt, above H, and an operator's retry
// or replay, which lowers the floor to its rows in its own transaction
// (OpsLowerFloor) while it holds the claim gate, so every claim sees both
// or neither. Autovacuum is left out of V: it inserts no row, and waiting
// for a vacuum of a large table would hold the floor for its length.
const (
	ClaimFloorStart = `WITH h AS MATERIALIZED (
    SELECT coalesce((SELECT max(id) FROM {{table}}), 0) AS max_id, (` + ClaimFloorRead + `) AS floor,
           (SELECT coalesce(max(gen), -1) FROM {{floor}}) AS gen)
SELECT h.max_id,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
       CASE WHEN h.max_id >= h.floor THEN
           coalesce((SELECT array_agg(l.virtualxid) FROM pg_locks l
                     WHERE l.locktype = 'virtualxid' AND l.pid IS DISTINCT FROM pg_backend_pid()
                       AND l.pid NOT IN (SELECT pid FROM pg_stat_activity
                                         WHERE backend_type IN ('autovacuum worker', 'autovacuum launcher'))), '{}')
       ELSE '{}' END::text,
       h.gen,
       h.floor
FROM h`
	ClaimFloorPassed = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint >= $1
   AND NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'virtualxid' AND virtualxid = ANY ($2::text[]))`
	ClaimFloorRaise = `UPDATE {{floor}} f
SET floor = least($1::bigint + 1, coalesce((SELECT o.id FROM {{table}} o
                                            WHERE o.state IN ('pending', 'claimed') AND o.retry_at = '-infinity' AND o.id >= f.floor
                                            ORDER BY o.id LIMIT 1), $1::bigint + 1)),
    gen = f.gen + 1
WHERE f.gen = $2 AND f.floor < $1::bigint + 1
RETURNING f.floor`
)

// ClaimFloorProof is what ClaimFloorStart returns, and what the later
// steps bind.
type ClaimFloorProof struct {
	MaxID int64  // H
	XMax  int64  // X
	VXIDs string // V, a text array literal; empty when Idle
	Gen   int64  // the floor's generation; -1: no floor row (schema version 7)
	Floor int64  // the floor when the proof started
}

// Idle reports that no row was inserted at or above the floor: the raise
// could not move it (it sets the floor to at most H+1), so the proof needs
// neither its read of pg_locks, which costs more the more sessions and
// locks the server holds, nor its later steps. ClaimFloorStart reads V
// only when the proof is not idle.
func (p ClaimFloorProof) Idle() bool { return p.MaxID < p.Floor }

// PassedArgs binds ClaimFloorPassed.
func (p ClaimFloorProof) PassedArgs() []any { return []any{p.XMax, p.VXIDs} }

// RaiseArgs binds ClaimFloorRaise.
func (p ClaimFloorProof) RaiseArgs() []any { return []any{p.MaxID, p.Gen} }

// RepairRetryAt gives the rows at the head of a claim's window that no
// relay wrote so the retry_at a relay writes. An unpublished row no relay
// holds is due by next_attempt_at and read by the claim by retry_at (see
// Claim); every writer keeps the two together: a failure (Fail) or an
// event written for later (Insert) sets both to the same time, anything
// else sets next_attempt_at to now. A row in backoff by next_attempt_at
// alone (later than now and than its retry_at) was written otherwise: a
// dump older than schema version 5 restored into this one (retry_at at its
// default), an insert by hand, a relay of version 3 or 4 failing it. The
// claim reads such a row as due, a first attempt or a due retry, and keeps
// it in its window as a row it cannot take: enough of them (a batch) hold
// back every aggregate of the shards behind them, and one of them every
// later row of its own aggregate, however many.
//
// Setting retry_at to next_attempt_at changes nothing the row waits for:
// it is still due at the same time and still holds back its aggregate's
// later rows until then (as a retry in backoff, on the retries' index),
// but the claim no longer reads it before then. That is what the
// statement does, to such rows among the window a claim of the shards $2
// reads first: the first $1 first attempts no relay holds from the claim
// floor on in id order, and the first $1 due retries no relay holds in
// retry_at order, in each passing over the rows held back behind a retry
// in backoff, as Claim does (one probe each). It reads what a claim reads,
// whatever the backlog (run it after WalkSettings), and locks only the
// rows it repairs, passing over those another transaction holds. A row is
// tested against the clock when it is read, not the transaction's start: a
// release or a write committed since then set next_attempt_at to its own
// now(), which would be later. It returns each row's id and the time it is
// due, NULL for one never due (next_attempt_at 'infinity'), which holds
// back its aggregate until an operator acts.
const RepairRetryAt = `
WITH fresh AS MATERIALIZED (
    SELECT o.ctid AS tid, o.id
    FROM {{table}} o
    WHERE o.state IN ('pending', 'claimed') AND o.retry_at = '-infinity'
      AND o.id >= (` + ClaimFloorRead + `)
      AND get_bit($2::varbit, o.shard) = 1 AND o.lease_owner IS NULL
      AND (SELECT true FROM {{table}} b
           WHERE b.aggregate_id = o.aggregate_id AND b.id < o.id
             AND b.state IN ('pending', 'claimed') AND b.retry_at > '-infinity' AND b.retry_at > now()
           LIMIT 1) IS NULL
    ORDER BY o.id
    LIMIT $1
), retry AS MATERIALIZED (
    SELECT o.ctid AS tid, o.id
    FROM {{table}} o
    WHERE o.state IN ('pending', 'claimed') AND o.retry_at > '-infinity' AND o.retry_at <= now()
      AND get_bit($2::varbit, o.shard) = 1 AND o.lease_owner IS NULL
      AND (SELECT true FROM {{table}} h
           WHERE h.aggregate_id = o.aggregate_id AND h.id < o.id
             AND h.state IN ('pending', 'claimed') AND h.retry_at > '-infinity' AND h.retry_at > now()
           LIMIT 1) IS NULL
    ORDER BY o.retry_at
    LIMIT $1
), stray AS MATERIALIZED (
    SELECT o.id
    FROM (SELECT tid, id FROM fresh UNION ALL SELECT tid, id FROM retry) w
    JOIN {{table}} o ON o.ctid = w.tid AND o.id = w.id
    WHERE o.state NOT IN ('published', 'dead') AND o.lease_owner IS NULL
      AND o.next_attempt_at > clock_timestamp() AND o.next_attempt_at > o.retry_at
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE {{table}} o
SET retry_at = o.next_attempt_at
FROM stray s
WHERE o.id = s.id
RETURNING o.id, CASE WHEN isfinite(o.next_attempt_at) THEN o.next_attempt_at END`

// RepairArgs binds RepairRetryAt.
type RepairArgs struct {
	Window int     // $1: how many rows of each kind to read, a claim's batch
	Shards []int16 // $2: the shards a claim reads, passed as a ShardMask
}

// Args returns the parameters in order.
func (a RepairArgs) Args() []any { return []any{a.Window, ShardMask(a.Shards)} }

// MarkPublished records broker acknowledgements for the rows IDs that Owner
// still holds under the claim Version. A row taken over by another
// incarnation meanwhile is left to it (it publishes the row again: at
// least once), and so is a row an operator returned to pending (a replay),
// which a late mark must not undo, even once the same incarnation has
// claimed it again.
//
// Version is the claim's transaction id, which Claim returns as each row's
// xmin: any later change of the row makes a new version with another xmin.
// The rows are reached by id rather than tuple id, so the index fetch
// prunes the page and the new version finds room there. It commits
// asynchronously (the setting is read at commit): a lost mark only
// republishes what the broker has. The lowest and highest id bound the
// rows, as parameters: on a partitioned outbox (docs/partitions.md)
// PostgreSQL prunes on them when the statement starts, so even a generic
// plan opens only the partitions the batch spans (computed in the
// statement, they pruned only as it ran, after every partition's scan was
// opened). See claim.md.
const MarkPublished = `
WITH async AS (SELECT set_config('synchronous_commit', 'off', true))
UPDATE {{table}} o
SET state = 'published', published_at = now(), lease_owner = NULL, lease_expires_at = NULL
WHERE o.id = ANY($1::bigint[]) AND o.lease_owner = $2 AND o.xmin = $3::text::xid
  AND o.id >= $4::bigint AND o.id <= $5::bigint
  AND o.state IN ('pending', 'claimed')
  AND EXISTS (SELECT 1 FROM async)`

// MarkArgs binds MarkPublished.
type MarkArgs struct {
	IDs     []int64 // $1
	Owner   string  // $2: the incarnation that claimed them
	Version uint32  // $3: the claim's transaction id, the rows' xmin as Claim returned it
}

// Args returns the parameters in order, with the ids' lowest and highest
// as $4 and $5.
func (a MarkArgs) Args() []any {
	lo, hi := span(a.IDs)
	return []any{Int64Array(a.IDs), a.Owner, strconv.FormatUint(uint64(a.Version), 10), lo, hi}
}

// span returns the lowest and highest of ids (1 and 0, an empty range, for
// none).
func span(ids []int64) (lo, hi int64) {
	if len(ids) == 0 {
		return 1, 0
	}
	lo, hi = ids[0], ids[0]
	for _, id := range ids[1:] {
		lo, hi = min(lo, id), max(hi, id)
	}
	return lo, hi
}

// RowsArgs binds Release.
type RowsArgs struct {
	IDs   []int64 // $1
	Owner string  // $2: the incarnation that claimed them
}

// Args returns the parameters in order, with the ids' lowest and highest
// as $3 and $4.
func (a RowsArgs) Args() []any {
	lo, hi := span(a.IDs)
	return []any{Int64Array(a.IDs), a.Owner, lo, hi}
}

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
WHERE id = ANY($1::bigint[]) AND state IN ('pending', 'claimed') AND lease_owner = $2
  AND id >= $3::bigint AND id <= $4::bigint`

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

// OwnedShards counts the shards the incarnation $1 owns. A round that
// finds nothing else changed reads it instead of taking its shards again:
// a peer whose acquire began before the incarnation registered can still
// take one of them (its snapshot does not list the incarnation), and
// gives it up at its own next round, leaving it unowned until taken again.
const OwnedShards = `SELECT count(*) FROM {{shards}} WHERE owner = $1`

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
const PruneLock = `SELECT pg_try_advisory_xact_lock({{prunekey}})`

// PruneSessionLock and PruneSessionUnlock take and give back PruneLock's
// key for a session, which holds it while it changes the partitions of a
// partitioned outbox (a transaction each), so one relay does that at a
// time.
const (
	PruneSessionLock   = `SELECT pg_try_advisory_lock({{prunekey}})`
	PruneSessionUnlock = `SELECT pg_advisory_unlock({{prunekey}})`
)

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
// where its page changed since the last vacuum. Up to it the counts are exact; beyond it they are estimates
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
// table's changes), summed over the partitions of a partitioned outbox,
// never below $1. Dead letters change slowly, and
// ids cannot tell them apart from the published rows written among them.
const DeadCount = `(SELECT CASE WHEN h.n < $1 THEN h.n
        ELSE greatest(h.n, (SELECT sum(m)::bigint FROM (SELECT max(c.reltuples) AS m FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid IN (SELECT {{tableliteral}}::regclass UNION ALL SELECT relid FROM pg_partition_tree({{tableliteral}}) WHERE isleaf)
              AND c.relkind = 'i' AND pg_get_expr(i.indpred, i.indrelid) = '(state = ''dead''::text)' GROUP BY i.indrelid) p)) END
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

// OldestDue is OldestUnpublished for the rows the relay may publish now:
// it leaves out a row held behind an earlier unpublished row of its
// aggregate that is scheduled for later (a not_before still to come),
// which waits by design, not for a relay, and whose lag would grow until
// the delayed row's time. A row behind a delayed row that has come due,
// and is not published yet, counts from that row's not_before rather than
// from its own creation, so it does not show as late the moment it is
// let go. Rows held behind a failed row in backoff still count: a failure
// is what the lag is to show. It walks the due index from its first entry
// (OldestUnpublished's), probing each row's aggregate on the backoff
// rows' aggregate index (schema version 5) for earlier rows with a
// not_before, and stops at the first row not held: one entry and one
// probe while nothing is held. The probe is a LATERAL subquery, which
// PostgreSQL keeps a probe per row: as NOT EXISTS it may become an
// anti-join that reads every row in backoff or scheduled. It walks $1
// entries at most (CountArgs): when all of them are held, the time of the
// last one read, which no row not held came due before, so the lag shown
// may be too high, never too low. NULL when no due row is left but held
// ones.
const OldestDue = `(SELECT coalesce(
    (SELECT greatest(w.due, x.nb) FROM (` + dueWalk + `) w,
         LATERAL (SELECT max(h.not_before) AS nb FROM {{table}} h
                  WHERE h.aggregate_id = w.aggregate_id AND h.id < w.id
                    AND h.state IN ('pending', 'claimed') AND h.retry_at > '-infinity') x
     WHERE x.nb IS NULL OR x.nb <= now()
     ORDER BY w.due LIMIT 1),
    (SELECT max(w.due) FROM (` + dueWalk + `) w HAVING count(*) >= $1)))`

// dueWalk is the first $1 due unpublished rows by the time they became
// due, on the due index.
const dueWalk = `SELECT greatest(o.created_at, o.not_before) AS due, o.id, o.aggregate_id FROM {{table}} o
        WHERE o.state IN ('pending', 'claimed') AND greatest(o.created_at, o.not_before) <= now()
        ORDER BY greatest(o.created_at, o.not_before) LIMIT $1`

// ScheduledCount counts the scheduled rows: unpublished, with a not_before
// still to come (Event.NotBefore), exactly up to $1 (CountArgs), and from
// $1 on from the planner's statistics of the scheduled index (as
// DeadCount), never below $1. They are part of what StatsBacklog and OpsSnapshot
// count, and not of the backlog shown: readers subtract it. It reads the
// scheduled index (schema version 7) from now on, $1 entries at most, and
// nothing of the rest of the backlog. A scalar subquery, so readers add it
// as a column beside the counts they run.
const ScheduledCount = `(SELECT CASE WHEN h.n < $1 THEN h.n
        ELSE greatest(h.n, (SELECT sum(m)::bigint FROM (SELECT max(c.reltuples) AS m FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid IN (SELECT {{tableliteral}}::regclass UNION ALL SELECT relid FROM pg_partition_tree({{tableliteral}}) WHERE isleaf)
              AND c.relkind = 'i' AND pg_get_expr(i.indpred, i.indrelid) LIKE '%not_before IS NOT NULL%' GROUP BY i.indrelid) p)) END
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

// StatsScheduled is Stats with the scheduled rows (ScheduledCount) and the
// next one's due time (NextScheduled) beside it, in one snapshot, so the
// backlog they are taken out of is the one they were counted in, and the
// oldest due row not held behind a scheduled one (OldestDue).
const StatsScheduled = `SELECT s.*, ` + ScheduledCount + `, ` + NextScheduled + `, ` + OldestDue + ` FROM (` + Stats + `) s`

// StatsLags is StatsLag with OldestDue beside it, walking at most $1
// (CountArgs) entries: the relay's lag gauges.
const StatsLags = `
SELECT ` + OldestUnpublished + `, ` + OldestDue + `, now()`

// StatsBacklogScheduled is StatsBacklog and ScheduledCount in one
// statement, for the relay's backlog and scheduled gauges.
const StatsBacklogScheduled = `SELECT (` + StatsBacklog + `), ` + ScheduledCount

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

// Schemas lists the schemas of the database (but PostgreSQL's own), each
// with whether it holds an outbox table named $1 (an ordinary or
// partitioned table) and whether that table is migrated far enough for a
// relay: its relays, shards and claim floor (schema version 8) tables are
// there too. It reads the catalogs only, so it sees every schema whatever
// the role's privileges on it, and a relay group finds the tables to serve
// with it (GroupConfig selects among the names).
const Schemas = `SELECT n.nspname,
       EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = n.oid AND c.relname = $1::text AND c.relkind IN ('r', 'p')),
       (SELECT count(*) FROM pg_class c
        WHERE c.relnamespace = n.oid AND c.relname IN ($1::text || '_relays', $1::text || '_shards', $1::text || '_claim_floor')) = 3
FROM pg_namespace n
WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
ORDER BY n.nspname`

// SchemasArgs binds Schemas.
type SchemasArgs struct {
	Name string // the outbox table's name in every schema
}

// Args returns the statement's arguments.
func (a SchemasArgs) Args() []any { return []any{a.Name} }
