package outboxsql

// Relay statements. $1 is always the relay's id where a statement takes one.
// Id lists are passed as array literals ('{1,2,3}') and per-row values as a
// JSON document, so the statements work with any database/sql driver.

// Claim takes up to $2 due rows of the shards in $4 (the shards this relay
// owns and has taken over), under a lease of $3, and returns them. One
// statement in a short transaction.
//
//   - "me" locks the relay's own heartbeat row FOR SHARE: a peer that declares
//     this relay dead (deleting the row) waits for an in-progress claim to
//     commit, and a relay that was declared dead claims nothing. The relay
//     changes its shard list only under the same lock as its claims, so the
//     list in $4 is what the shards table says.
//   - "fence" lists aggregates that must hold back their later rows: a row in
//     retry backoff. A dead row does not fence its aggregate. (Rows claimed by
//     a previous owner of a shard are handled before the shard is claimed
//     from: see ShardsInHandover.)
//   - Claimed rows are taken over when their lease expired or their relay is
//     gone. A live relay's own claimed rows are in its memory; it re-claims
//     them only once their lease expired.
//   - "fence" is MATERIALIZED: computed once, not once per candidate row.
//   - The shard list is a parameter, not a join, so the planner walks the
//     claim index in id order and stops at the limit instead of sorting every
//     unpublished row.
const Claim = `
WITH me AS (
    SELECT id FROM {{relays}} WHERE id = $1 FOR SHARE
), fence AS MATERIALIZED (
    SELECT o.aggregate_id, min(o.id) AS first_id
    FROM {{table}} o
    WHERE o.state = 'pending' AND o.attempts > 0 AND o.next_attempt_at > now()
      AND o.shard = ANY($4::smallint[])
    GROUP BY o.aggregate_id
), due AS (
    SELECT o.id
    FROM {{table}} o
    WHERE o.state IN ('pending', 'claimed')
      AND o.shard = ANY($4::smallint[])
      AND ((o.state = 'pending' AND o.next_attempt_at <= now())
        OR (o.state = 'claimed' AND (o.lease_expires_at <= now()
            OR (o.lease_owner <> $1 AND o.lease_owner NOT IN (SELECT id FROM {{relays}})))))
      AND NOT EXISTS (SELECT 1 FROM fence f WHERE f.aggregate_id = o.aggregate_id AND f.first_id < o.id)
      AND EXISTS (SELECT 1 FROM me)
    ORDER BY o.id
    LIMIT $2
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE {{table}} o
SET state = 'claimed', lease_owner = $1, lease_expires_at = now() + $3::interval
FROM due
WHERE o.id = due.id
RETURNING o.id, o.event_id::text, o.topic, o.aggregate_type, o.aggregate_id, o.event_type,
          o.content_type, o.payload, o.headers::text, o.created_at, o.attempts`

// ShardsInHandover returns which of the shards in $2 still hold rows claimed
// by another live relay under a valid lease: rows the shard's previous owner
// is still publishing. The relay claims from a newly acquired shard only once
// it is out of handover, so the previous owner's in-flight events are
// published before any later event of their aggregates. It scans the claim
// index, so it runs only while some acquired shard is in handover.
const ShardsInHandover = `
SELECT DISTINCT o.shard FROM {{table}} o
WHERE o.state = 'claimed' AND o.shard = ANY($2::smallint[])
  AND o.lease_owner <> $1 AND o.lease_expires_at > now()
  AND o.lease_owner IN (SELECT id FROM {{relays}})`

// ClaimPlan runs first in the claim's transaction. Outbox statistics are
// often stale (a burst arrives after the table was analyzed nearly empty), and
// with a low row estimate the planner sorts every unpublished row to return a
// batch, which makes draining a backlog quadratic. Without sorts and bitmap
// scans it walks the claim index in id order and stops at the limit.
//
// It also turns off synchronous commit for the claim, as AsyncCommit does.
const ClaimPlan = `SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('synchronous_commit', 'off', true)`

// AsyncCommit makes the relay's own bookkeeping transaction commit without
// waiting for its WAL flush. Losing such a commit in a database crash is
// harmless: a lost claim leaves rows pending (published again: at least
// once), a lost mark republishes, a lost failure forgets one attempt, a lost
// release leaves rows to lease expiry. Applications' writes are unaffected.
const AsyncCommit = `SELECT set_config('synchronous_commit', 'off', true)`

// MarkPublished records broker acknowledgements for the ids in $1. A row
// another relay took over meanwhile is still marked: the broker has it. The
// statement runs as its own transaction and turns off synchronous commit for
// it (see AsyncCommit) in the same round trip: the setting is read at commit.
const MarkPublished = `
WITH async AS (SELECT set_config('synchronous_commit', 'off', true))
UPDATE {{table}}
SET state = 'published', published_at = now(), lease_owner = NULL, lease_expires_at = NULL
WHERE id = ANY($1::bigint[]) AND state IN ('claimed', 'pending')
  AND EXISTS (SELECT 1 FROM async)`

// Fail records failed publishes: $1 is a JSON array of {id, err, delay_ms},
// $2 the relay id, $3 MaxAttempts. Rows reaching MaxAttempts become dead.
const Fail = `
UPDATE {{table}} o
SET attempts = o.attempts + 1,
    state = CASE WHEN o.attempts + 1 >= $3 THEN 'dead' ELSE 'pending' END,
    next_attempt_at = now() + f.delay_ms * interval '1 millisecond',
    last_error = f.err,
    lease_owner = NULL,
    lease_expires_at = NULL
FROM jsonb_to_recordset($1::jsonb) AS f(id bigint, err text, delay_ms bigint)
WHERE o.id = f.id AND o.state = 'claimed' AND o.lease_owner = $2
RETURNING o.id, o.state`

// Release returns claimed rows this relay will not publish (shutdown, held
// back behind a failed row of their aggregate, or from a claim whose commit
// was not confirmed) to pending, unchanged.
const Release = `
UPDATE {{table}}
SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL
WHERE id = ANY($1::bigint[]) AND state = 'claimed' AND lease_owner = $2`

// RebalancePayload is the NOTIFY payload that asks relays to rebalance now
// (a relay joined, or gave up shards); writers' notifications carry none.
const RebalancePayload = "rebalance"

// NotifyRebalance asks every listening relay of the table to rebalance now.
const NotifyRebalance = `SELECT pg_notify({{channel}}, 'rebalance')`

// Heartbeat registers the relay or refreshes its row, and returns whether
// it registered (a new member, which peers should learn of at once).
const Heartbeat = `
INSERT INTO {{relays}} (id, host) VALUES ($1, $2)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()
RETURNING xmax = 0`

// ForgetStaleRelays deletes relays whose heartbeat is older than $1. Their
// shards become free and their claims can be taken over.
const ForgetStaleRelays = `
DELETE FROM {{relays}} WHERE heartbeat_at < now() - $1::interval RETURNING id`

// LiveRelays lists the live relays in a stable order.
const LiveRelays = `SELECT id FROM {{relays}} ORDER BY id`

// ReleaseShards gives up this relay's shards that are not in $2.
const ReleaseShards = `
UPDATE {{shards}} SET owner = NULL, updated_at = now()
WHERE owner = $1 AND shard <> ALL($2::smallint[])`

// AcquireShards takes the shards in $2 that are free or owned by a relay
// that is gone, and returns the shards this relay owns afterwards.
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

// Leave releases every shard of the relay and deletes its heartbeat, so
// peers take over at once on a clean shutdown.
const LeaveShards = `UPDATE {{shards}} SET owner = NULL, updated_at = now() WHERE owner = $1`

// LeaveRelay deletes the relay's heartbeat row.
const LeaveRelay = `DELETE FROM {{relays}} WHERE id = $1`

// Prune deletes up to $2 published rows older than $1. It walks the primary
// key only up to the first row created inside the window ("bound", found
// from the start of the key, where pruning leaves few rows), because a row
// created inside the window cannot have been published before it; without
// the bound every round would scan the whole retained history.
const Prune = `
WITH bound AS (
    SELECT coalesce(
        (SELECT id FROM {{table}} WHERE created_at >= now() - $1::interval ORDER BY id LIMIT 1),
        (SELECT max(id) + 1 FROM {{table}})) AS id
)
DELETE FROM {{table}} WHERE id IN (
    SELECT o.id FROM {{table}} o, bound
    WHERE o.id < bound.id
      AND o.state = 'published' AND o.published_at < now() - $1::interval
    ORDER BY o.id
    LIMIT $2)`

// PruneLock is taken (pg_try_advisory_xact_lock) so one relay prunes at a time.
const PruneLock = `SELECT pg_try_advisory_xact_lock(hashtext({{channel}} || '.prune'))`

// Stats summarises the outbox for health checks: backlog (pending and
// claimed rows), the creation time of the oldest of them, and dead rows.
const Stats = `
SELECT
    (SELECT count(*) FROM {{table}} WHERE state IN ('pending', 'claimed')),
    (SELECT created_at FROM {{table}} WHERE state IN ('pending', 'claimed') ORDER BY id LIMIT 1),
    (SELECT count(*) FROM {{table}} WHERE state = 'dead'),
    now()`

// TopicStats is Stats per topic.
const TopicStats = `
SELECT topic,
       count(*) FILTER (WHERE state IN ('pending', 'claimed')),
       extract(epoch FROM now() - min(created_at) FILTER (WHERE state IN ('pending', 'claimed')))::float8,
       count(*) FILTER (WHERE state = 'dead')
FROM {{table}}
WHERE state IN ('pending', 'claimed', 'dead')
GROUP BY topic
ORDER BY topic`
