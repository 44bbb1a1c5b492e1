package outboxsql

// Operator statements (package outboxadmin, the outbox CLI). Selections are
// fixed statements whose optional filters are NULL when unset, so no SQL is
// built from input: $ids is a bigint array literal or NULL, $topic,
// $aggregate and $type are exact matches or NULL, and $since and $until
// timestamptz or NULL.

// StateColumn is a row's state as operators see it: "claimed" for an
// unpublished row a relay holds under a lease. Relays record a claim in the
// lease columns alone and leave state 'pending' (see Claim), so the state
// column says "claimed" only for rows claimed by relays of schema version 2.
const StateColumn = `CASE WHEN state IN ('pending', 'claimed') AND lease_owner IS NOT NULL THEN 'claimed' ELSE state END`

// opsRowColumns is what an operator sees of a row.
const opsRowColumns = `id, event_id::text, topic, aggregate_type, aggregate_id, event_type, content_type,
       length(payload), headers::text, created_at, ` + StateColumn + `, attempts, next_attempt_at,
       coalesce(last_error, ''), published_at, coalesce(lease_owner, '')`

// deadFilter selects dead rows by $1 ids, $2 topic, $3 aggregate id, $4
// event type, $5 created at or after and $6 created before. The
// dead-letter partial index serves it.
const deadFilter = `state = 'dead'
  AND ($1::bigint[] IS NULL OR id = ANY($1::bigint[]))
  AND ($2::text IS NULL OR topic = $2)
  AND ($3::text IS NULL OR aggregate_id = $3)
  AND ($4::text IS NULL OR event_type = $4)
  AND ($5::timestamptz IS NULL OR created_at >= $5)
  AND ($6::timestamptz IS NULL OR created_at < $6)`

// OpsDeadList pages through dead rows matching deadFilter in id order: ids
// above $7, at most $8.
const OpsDeadList = `SELECT ` + opsRowColumns + `
FROM {{table}}
WHERE ` + deadFilter + ` AND id > $7
ORDER BY id
LIMIT $8`

// OpsDeadCount counts the dead rows matching deadFilter (on the dead-letter
// index, like the list).
const OpsDeadCount = `SELECT count(*) FROM {{table}} WHERE ` + deadFilter

// OpsRow reads one row ($1) in any state, with its payload.
const OpsRow = `SELECT ` + opsRowColumns + `, payload FROM {{table}} WHERE id = $1`

// OpsDeadLock locks the dead rows matching deadFilter, in id order, for a
// retry or drop in the same transaction.
const OpsDeadLock = `SELECT ` + opsRowColumns + `
FROM {{table}}
WHERE ` + deadFilter + `
ORDER BY id
FOR UPDATE`

// OpsLockUnpublished locks the pending and claimed rows of the aggregates in
// $1 (a text array literal). FOR UPDATE without SKIP LOCKED waits for a
// claim in progress, so the rows it returns show which are in flight for
// certain, and no relay can claim them until the retry commits. A retry
// runs it holding the claim gate, so it reads the aggregates' rows on the
// aggregate index (schema version 5) and nothing else of the backlog.
const OpsLockUnpublished = `SELECT id, aggregate_id, ` + StateColumn + `
FROM {{table}}
WHERE state IN ('pending', 'claimed') AND aggregate_id = ANY($1::text[])
ORDER BY id
FOR UPDATE`

// OpsRetry returns the dead rows $1 to pending, due now, with fresh
// attempts, as first attempts (retry_at, see Claim). last_error is kept: it says why the event died until the relay
// publishes it or records a new failure.
const OpsRetry = `UPDATE {{table}}
SET state = 'pending', attempts = 0, next_attempt_at = now(), retry_at = '-infinity',
    lease_owner = NULL, lease_expires_at = NULL
WHERE id = ANY($1::bigint[]) AND state = 'dead'`

// OpsDrop deletes the dead rows $1.
const OpsDrop = `DELETE FROM {{table}} WHERE id = ANY($1::bigint[]) AND state = 'dead'`

// OpsWake wakes the relays listening on the channel once the transaction
// commits, so retried and replayed rows go out without waiting for a poll.
const OpsWake = `SELECT pg_notify({{channel}}, '')`

// OpsPruneLock takes the advisory lock the relay's pruning takes (see
// Prune and PruneLock: the same key), waiting for a prune in progress. A
// replay holds it so a concurrent prune cannot delete a row the replay has
// just returned to pending.
const OpsPruneLock = `SELECT pg_advisory_xact_lock(hashtext({{channel}} || '.prune'))`

// OpsReplaySelect lists the published rows a replay selects: published at
// or after $1, with $2 topic and $3 aggregate id when not NULL, read on the
// prune index (schema version 5) from $1 on, however many published rows
// are retained before it. Rows come
// grouped by aggregate, each aggregate's in id order, aggregates in the
// order of their first row, so the replay can reset each aggregate's rows
// in one statement.
const OpsReplaySelect = `SELECT aggregate_id, id, topic FROM (
    SELECT aggregate_id, id, topic, min(id) OVER (PARTITION BY aggregate_id) AS first_id
    FROM {{table}}
    WHERE state = 'published' AND published_at >= $1
      AND ($2::text IS NULL OR topic = $2)
      AND ($3::text IS NULL OR aggregate_id = $3)
) s
ORDER BY first_id, id`

// OpsReplay returns the rows $1 (a bigint array literal of whole
// aggregates' rows) to pending, due now, if they are still published, and
// returns the ids and topics reset.
const OpsReplay = `UPDATE {{table}}
SET state = 'pending', attempts = 0, next_attempt_at = now(), retry_at = '-infinity', published_at = NULL,
    lease_owner = NULL, lease_expires_at = NULL
WHERE id = ANY($1::bigint[]) AND state = 'published'
RETURNING id, topic`

// OpsClaimGate takes the claim gate exclusively (see ClaimSettings): it waits
// for the claims in progress to end and holds new ones back until the
// operator's transaction ends, so every claim sees a retry or replay either
// whole or not at all. Retry and replay take it right before they change
// rows; operator transactions are short and bounded by OpsTimeouts.
const OpsClaimGate = `SELECT pg_advisory_xact_lock(hashtext({{channel}} || '.claim'))`

// OpsWALGate is taken (shared) by retry and replay before anything else in
// their transaction, and exclusively by a WAL relay while it creates its
// slot (WALSlotGate): a retry or replay either commits before the slot's
// snapshot, which then holds its rows as pending and publishes them, or
// runs after the slot exists and is refused (OpsWALSlots). It is taken
// before the transaction has an id, since creating a slot waits for every
// transaction with one to end. Its key is the table's OID ($1, the
// table's quoted name), so any spelling of the table (with or without its
// schema) takes the same lock.
const OpsWALGate = `SELECT pg_advisory_xact_lock_shared(` + walGateKey + `)`

// walGateKey is OpsWALGate's two-part advisory lock key: a fixed class,
// and the table's OID shifted into int4's range.
const walGateKey = `hashtext('txoutbox.wal.gate'), ($1::regclass::oid::bigint - 2147483648)::int`

// OpsWALSlots names the WAL relay slots that may be streaming the outbox
// table $1 (its quoted name), "" for none: a pgoutput slot of this
// database named $2 (the operator's setting, by default the WAL relay's
// default slot name), or found through the table's OID: named as a
// publication that includes the table (a WAL relay names its slot and
// publication alike by default), or named in the marker a WAL relay keeps
// in the comment of its publication (walrelay's marker), whatever the
// names, so an operator who omits --slot is still refused. Rows an
// operator returns to pending are changed by an UPDATE, which the WAL
// relay's publication does not carry: the relay would never publish them,
// and its cleanup (or outbox wal takeover) would take them for rows it
// had. Other logical replication (a subscription, a CDC tool's slot and
// FOR ALL TABLES publication) does not match. pg_get_publication_tables
// compares table OIDs, which needs no privilege on other tables' schemas.
const OpsWALSlots = `SELECT coalesce(string_agg(s.slot_name, ', ' ORDER BY s.slot_name), '')
FROM pg_replication_slots s
WHERE s.slot_type = 'logical' AND s.plugin = 'pgoutput' AND s.database = current_database()
  AND (s.slot_name = $2 OR ` + walRelayStreamsPrefix + `$1::regclass` + walRelayStreamsSuffix + `)`

// walRelayStreams is true when pgoutput slot s of the current database is
// a WAL relay's for table (an expression of its oid): the slot is named as
// a publication that carries the table, or in the marker a WAL relay keeps
// in such a publication's comment.
func walRelayStreams(table string) string {
	return walRelayStreamsPrefix + table + walRelayStreamsSuffix
}

const (
	walRelayStreamsPrefix = `EXISTS (SELECT 1 FROM pg_publication p, LATERAL pg_get_publication_tables(p.pubname::text) t
      WHERE t.relid = `
	walRelayStreamsSuffix = ` AND (p.pubname = s.slot_name
        OR substring(obj_description(p.oid, 'pg_publication') FROM '^txoutbox: (?:initialising )?slot (\S+)') = s.slot_name))`
)

// OpsTimeouts runs first in every operator transaction: a statement or a
// lock wait longer than $1 fails instead of stalling the operator, and a
// session left idle in the transaction (a tool frozen or cut off) is ended,
// releasing the rows it locked, which relays would otherwise wait behind.
const OpsTimeouts = `SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $1, true),
       set_config('idle_in_transaction_session_timeout', $1, true)`

// OpsRelays lists the relays with their heartbeat age by the database
// clock.
const OpsRelays = `SELECT id, host, started_at, heartbeat_at,
       extract(epoch FROM now() - heartbeat_at)::float8
FROM {{relays}}
ORDER BY id`

// OpsShards lists every shard and its owner, empty when free.
const OpsShards = `SELECT shard, coalesce(owner, '') FROM {{shards}} ORDER BY shard`

// OpsHandovers lists the shards in handover: shards holding rows that a
// live incarnation other than the shard's owner still has claimed under a
// valid lease (the previous owner finishing its batch; see
// ShardsInHandover). It walks the claim index, so it costs as much as the
// backlog.
const OpsHandovers = `SELECT DISTINCT o.shard
FROM {{table}} o JOIN {{shards}} s ON s.shard = o.shard
WHERE o.state IN ('pending', 'claimed') AND o.lease_owner IS NOT NULL AND o.lease_expires_at > now()
  AND o.lease_owner IS DISTINCT FROM s.owner
  AND o.lease_owner IN (SELECT id FROM {{relays}})
ORDER BY 1`

// OpsSnapshot reads what a console samples over time: backlog, the
// creation time of the oldest unpublished row (OldestUnpublished), the dead
// count (Stats), the
// highest row id (the primary key's last entry, which counts the events
// written) and the database clock.
const OpsSnapshot = `
SELECT
    (SELECT count(*) FROM {{table}} WHERE state IN ('pending', 'claimed')),
    ` + OldestUnpublished + `,
    (SELECT count(*) FROM {{table}} WHERE state = 'dead'),
    (SELECT coalesce(max(id), 0) FROM {{table}}),
    now()`

// OpsHead reads what a snapshot takes besides the counts: the highest row
// id, the creation time of the oldest unpublished row and the database
// clock, from the last entries of the primary key and the lag index.
const OpsHead = `SELECT (SELECT coalesce(max(id), 0) FROM {{table}}), ` + OldestUnpublished + `, now()`

// lookup finds the rows whose column col equals $1, newest first, at most
// $3, on indexes only: the unpublished ones on the aggregate index (by
// aggregate) or the claim index (by event id), the dead ones on the dead
// aggregate index (by aggregate) or the dead-letter index (by event id),
// and the published ones among the newest $2 rows of the primary key. By
// aggregate, it reads the aggregate's rows and $2 index entries, whatever
// the table holds. Without an index on col over every
// row (which would cost each insert, claim and publish one more index
// write), an older published row is found by its id only.
func lookup(col, cast string) string {
	return `SELECT ` + opsRowColumns + `
FROM {{table}}
WHERE id IN (
    SELECT id FROM {{table}} WHERE state IN ('pending', 'claimed') AND ` + col + ` = $1` + cast + `
    UNION
    SELECT id FROM {{table}} WHERE state = 'dead' AND ` + col + ` = $1` + cast + `
    UNION
    SELECT id FROM (SELECT id, ` + col + ` FROM {{table}} ORDER BY id DESC LIMIT $2) recent WHERE ` + col + ` = $1` + cast + `
)
ORDER BY id DESC
LIMIT $3`
}

// OpsLookupAggregate finds an aggregate's rows (see lookup); the aggregate
// indexes (schema version 5) serve its unpublished and dead ones.
var OpsLookupAggregate = lookup("aggregate_id", "")

// OpsLookupEventID finds the rows of an event id (see lookup).
var OpsLookupEventID = lookup("event_id", "::uuid")

// LookupArgs binds OpsLookupAggregate and OpsLookupEventID.
type LookupArgs struct {
	Key    string // $1: the aggregate id, or the event id as text
	Recent int    // $2: how many of the newest rows to search for published ones
	Limit  int    // $3: the most rows returned
}

// Args returns the parameters in order.
func (a LookupArgs) Args() []any { return []any{a.Key, a.Recent, a.Limit} }
