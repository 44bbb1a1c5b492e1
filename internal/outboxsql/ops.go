package outboxsql

import "time"

// Operator statements (package outboxadmin, the outbox CLI). Selections are
// fixed statements whose optional filters are NULL when unset, so no SQL is
// built from input: $ids is a bigint array literal or NULL, $topic,
// $aggregate and $type are exact matches or NULL, and $since and $until
// timestamptz or NULL.

// StateColumn is a row's state as operators see it: "claimed" for an
// unpublished row a relay holds under a lease. Relays record a claim in the
// lease columns alone and leave state 'pending' (see claim.md), so the state
// column says "claimed" only for rows claimed by relays of schema version 2.
const StateColumn = `CASE WHEN state IN ('pending', 'claimed') AND lease_owner IS NOT NULL THEN 'claimed' ELSE state END`

// opsRowColumns is what an operator sees of a row.
const opsRowColumns = `id, event_id::text, topic, aggregate_type, aggregate_id, event_type, content_type,
       length(payload), headers::text, created_at, ` + StateColumn + `, attempts, next_attempt_at,
       coalesce(last_error, ''), published_at, coalesce(lease_owner, '')`

// The dead-letter selections (OpsDeadList, OpsDeadCount, OpsDeadLock)
// take the filters $1 ids (a bigint array literal), $2 topic, $3
// aggregate id, $4 event type, $5 created at or after and $6 created
// before, each NULL when unset, and come in one form per set of filters
// given (DeadFilters), which names only those: a condition "$n IS NULL OR
// ..." cannot bound an index scan in a generic plan (the one a prepared
// statement switches to), and a few of them make it expect a row or two,
// so it reads and sorts whole ranges for them. The first filter given of
// ids, aggregate, type, topic and creation time leads (see deadLead): it
// is written so that only its index can give the rows in the order asked,
// and the others are checked on the rows of that index's range.

// DeadFilters says which of the dead-letter filters are set.
type DeadFilters uint8

// The dead-letter filters.
const (
	DeadIDs       DeadFilters = 1 << iota // $1, on the primary key
	DeadTopic                             // $2, on the dead topic index (topic, id)
	DeadAggregate                         // $3, on the dead aggregate index (aggregate_id, id)
	DeadType                              // $4, on the dead type index (a hash of event_type)
	DeadSince                             // $5, on the dead creation index (created_at)
	DeadUntil                             // $6, on the dead creation index
	// DeadForms is how many sets of filters there are, not a filter.
	DeadForms = 1 << iota
)

// DeadArgs binds the dead-letter filters, $1 to $6, of OpsDeadList,
// OpsDeadCount and OpsDeadLock. A nil IDs, an empty string and a zero
// time are unset: bound as NULL, and left out of the form (Filters).
type DeadArgs struct {
	IDs                         []int64   // $1
	Topic, Aggregate, EventType string    // $2, $3, $4
	Since, Until                time.Time // $5, $6: created at or after, and before
}

// Filters says which filters a sets: the form of the statement to run.
func (a DeadArgs) Filters() DeadFilters {
	var f DeadFilters
	for _, x := range []struct {
		on bool
		f  DeadFilters
	}{
		{a.IDs != nil, DeadIDs}, {a.Topic != "", DeadTopic}, {a.Aggregate != "", DeadAggregate},
		{a.EventType != "", DeadType}, {!a.Since.IsZero(), DeadSince}, {!a.Until.IsZero(), DeadUntil},
	} {
		if x.on {
			f |= x.f
		}
	}
	return f
}

// Args returns $1 to $6, the statement OpsDeadLock(a.Filters()) takes.
func (a DeadArgs) Args() []any {
	var ids any
	if a.IDs != nil {
		ids = Int64Array(a.IDs)
	}
	return []any{ids, nullString(a.Topic), nullString(a.Aggregate), nullString(a.EventType), nullTime(a.Since), nullTime(a.Until)}
}

// DeadListArgs binds OpsDeadList: the filters, then a page.
type DeadListArgs struct {
	DeadArgs
	After int64 // $7: the page starts after this id
	Limit int   // $8: the most rows of a page
}

// Args returns the parameters in order.
func (a DeadListArgs) Args() []any { return append(a.DeadArgs.Args(), a.After, a.Limit) }

// DeadCountArgs binds OpsDeadCount: the filters, then how far to count.
type DeadCountArgs struct {
	DeadArgs
	Cap int // $7: the most rows counted
}

// Args returns the parameters in order.
func (a DeadCountArgs) Args() []any { return append(a.DeadArgs.Args(), a.Cap) }

// nullString binds "" as SQL NULL (the filter is off).
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// nullTime binds the zero time as SQL NULL.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// deadLead returns the leading condition of the filters f and the order
// of the rows. With after, the condition starts after the row id $7.
//
// An equality on the column of a (column, id) index would let the planner
// take the rows in id order from the dead-letter index instead, filtering
// them, which reads every dead row ahead of a rare value's (it estimates
// an equality's share of the rows as 1 in the column's distinct values).
// The same condition written as a range ((column, id) > ($n, $7) AND
// column <= $n) is no equality to it, so only the (column, id) index
// gives the order asked for, (column, id), which is id order on the
// rows: it reads the page. Ids, the event type (a hash index) and the
// creation window take the rows their index finds and sort them (id + 0:
// no index gives that order): the ids given, the type's dead rows, or the
// window's index range.
func deadLead(f DeadFilters, after bool) (lead DeadFilters, cond, order string) {
	start := "0"
	if after {
		start = "$7"
	}
	byColumn := func(col, param string) string {
		return `(` + col + `, id) > (` + param + `::text, ` + start + `) AND ` + col + ` <= ` + param + `::text`
	}
	switch {
	case f&DeadIDs != 0:
		return DeadIDs, `id = ANY($1::bigint[])`, `id + 0`
	case f&DeadAggregate != 0:
		return DeadAggregate, byColumn("aggregate_id", "$3"), `aggregate_id, id`
	case f&DeadType != 0:
		return DeadType, `event_type = $4::text`, `id + 0`
	case f&DeadTopic != 0:
		return DeadTopic, byColumn("topic", "$2"), `topic, id`
	case f&(DeadSince|DeadUntil) != 0:
		return DeadSince | DeadUntil, `created_at >= coalesce($5::timestamptz, '-infinity') AND created_at < coalesce($6::timestamptz, 'infinity')`, `id + 0`
	}
	return 0, `true`, `id`
}

// deadConditions are the conditions of the filters that do not lead, and
// what an unset one checks (that it is NULL, which also gives the
// parameter its type). A time bound that does not lead is written on
// created_at + 0 s, which no index serves: a generic plan takes a one-sided
// bound for a third of the rows, and would read the creation index from
// the start of the dead letters to a --until instead of the leading
// filter's range.
var deadConditions = []struct {
	f          DeadFilters
	set, unset string
}{
	{DeadIDs, `id = ANY($1::bigint[])`, `$1::bigint[] IS NULL`},
	{DeadTopic, `topic = $2::text`, `$2::text IS NULL`},
	{DeadAggregate, `aggregate_id = $3::text`, `$3::text IS NULL`},
	{DeadType, `event_type = $4::text`, `$4::text IS NULL`},
	{DeadSince, `created_at + interval '0 s' >= $5::timestamptz`, `$5::timestamptz IS NULL`},
	{DeadUntil, `created_at + interval '0 s' < $6::timestamptz`, `$6::timestamptz IS NULL`},
}

// deadWhere is the condition and the order of the dead rows the filters f
// select.
func deadWhere(f DeadFilters, after bool) (where, order string) {
	lead, cond, order := deadLead(f, after)
	where = `state = 'dead' AND ` + cond
	for _, c := range deadConditions {
		switch {
		case f&c.f == 0:
			where += "\n  AND " + c.unset
		case lead&c.f == 0:
			where += "\n  AND " + c.set
		}
	}
	switch {
	case !after:
	case lead == 0:
		where += "\n  AND id > $7" // the dead-letter index, from $7 on
	case order == `id + 0`:
		// Not on an id index: a generic plan would walk it from $7,
		// filtering, rather than take the lead's rows.
		where += "\n  AND id + 0 > $7"
	}
	return where, order
}

// OpsDeadList pages through the dead rows the filters f select in id
// order: ids above $7, at most $8. It reads its page on the leading
// filter's index (with the rows the other filters leave out), or, led by
// ids or the creation window, the rows those select.
func OpsDeadList(f DeadFilters) string {
	where, order := deadWhere(f, true)
	return deadSelect(where, order, `LIMIT $8`)
}

// deadSelect reads the operators' columns of the rows where selects, in
// order, then tail (a LIMIT, a locking clause).
func deadSelect(where, order, tail string) string {
	return `SELECT ` + opsRowColumns + `
FROM {{table}}
WHERE ` + where + `
ORDER BY ` + order + `
` + tail
}

// OpsDeadCount counts the dead rows the filters f select, up to $7: it
// reads $7 entries of the leading filter's index at most (or the rows the
// ids or the creation window select), so a count of $7 means at least $7.
func OpsDeadCount(f DeadFilters) string {
	where, order := deadWhere(f, false)
	return `SELECT count(*) FROM (SELECT 1 FROM {{table}} WHERE ` + where + ` ORDER BY ` + order + ` LIMIT $7) s`
}

// OpsRow reads one row ($1) in any state, with its payload.
const OpsRow = `SELECT ` + opsRowColumns + `, payload FROM {{table}} WHERE id = $1`

// OpsDeadLock locks the dead rows the filters f select, in id order, for
// a retry or drop in the same transaction: it reads the rows it locks on
// the leading filter's index, and those the other filters leave out.
func OpsDeadLock(f DeadFilters) string {
	where, order := deadWhere(f, false)
	return deadSelect(where, order, `FOR UPDATE`)
}

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

// OpsLowerFloor lowers the claim floor (see ClaimFloorStart) to the lowest
// of the rows $1 (a bigint array literal) a retry or replay returns to
// pending, in its transaction, so the claim walks them; it bumps the
// floor's generation, so no relay's round begun before raises it over them.
const OpsLowerFloor = `UPDATE {{floor}} SET floor = least(floor, coalesce((SELECT min(x) FROM unnest($1::bigint[]) x), floor)), gen = gen + 1`

// OpsDrop deletes the dead rows $1.
const OpsDrop = `DELETE FROM {{table}} WHERE id = ANY($1::bigint[]) AND state = 'dead'`

// OpsWake wakes the relays listening on the channel once the transaction
// commits, so retried and replayed rows go out without waiting for a poll.
const OpsWake = `SELECT pg_notify({{channel}}, '')`

// OpsPruneLock takes the advisory lock the relay's pruning takes (see
// Prune and PruneLock: the same key), waiting for a prune in progress. A
// replay holds it so a concurrent prune cannot delete a row the replay has
// just returned to pending.
const OpsPruneLock = `SELECT pg_advisory_xact_lock({{prunekey}})`

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

// ReplaySelectArgs binds OpsReplaySelect; an empty Topic or Aggregate is
// unset (NULL).
type ReplaySelectArgs struct {
	Since     time.Time // $1: published at or after
	Topic     string    // $2
	Aggregate string    // $3
}

// Args returns the parameters in order.
func (a ReplaySelectArgs) Args() []any {
	return []any{a.Since, nullString(a.Topic), nullString(a.Aggregate)}
}

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
const OpsClaimGate = `SELECT pg_advisory_xact_lock({{claimkey}})`

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
// default slot name of before the names were keyed by the database) or
// the table's default slot name (WALName, computed here), or found
// through the table's OID: named as a
// publication that includes the table (a WAL relay names its slot and
// publication alike by default), or named in the marker a WAL relay keeps
// in the comment of its publication (walrelay's marker), whatever the
// names, so an operator who omits --slot is still refused. Rows an
// operator returns to pending are changed by an UPDATE, which the WAL
// relay's publication does not carry: the relay would never publish them,
// and its cleanup (or outbox wal takeover) would take them for rows it
// had. Other logical replication (a subscription, a CDC tool's slot and
// FOR ALL TABLES publication) does not match. The catalogs are compared
// by OID, which needs no privilege on other tables' schemas.
var OpsWALSlots = `SELECT coalesce(string_agg(s.slot_name, ', ' ORDER BY s.slot_name), '')
FROM pg_replication_slots s
WHERE s.slot_type = 'logical' AND s.plugin = 'pgoutput' AND s.database = current_database()
  AND (s.slot_name = $2 OR s.slot_name = ` + walNameSQL(`$1::regclass`) + ` OR ` + walRelayStreams(`$1::regclass`) + `)`

// RelayWALSlots is OpsWALSlots for the polling relay (relay.ErrWALStreams),
// which stops claiming on a match: only a slot named $2 (the WAL relay's
// default name for table $1 of before the names were keyed by the
// database), or the table's default name (WALName), or named in a WAL
// relay's marker on a
// publication of the table counts. A slot merely named as a publication
// of the table (a native subscription's, whose slot takes the
// subscription's name) does not halt delivery.
var RelayWALSlots = `SELECT coalesce(string_agg(s.slot_name, ', ' ORDER BY s.slot_name), '')
FROM pg_replication_slots s
WHERE s.slot_type = 'logical' AND s.plugin = 'pgoutput' AND s.database = current_database()
  AND (s.slot_name = $2 OR s.slot_name = ` + walNameSQL(`$1::regclass`) + ` OR EXISTS (SELECT 1 FROM pg_publication p
      WHERE ` + publicationCarries("$1::regclass") + `
        AND substring(obj_description(p.oid, 'pg_publication') FROM '^txoutbox: (?:initialising )?slot (\S+)') = s.slot_name))`

// WALSlotsArgs binds OpsWALSlots and RelayWALSlots.
type WALSlotsArgs struct {
	Table string // $1: the table's quoted name (Names.Table)
	Slot  string // $2: the slot name that counts whatever its publication
}

// Args returns the parameters in order.
func (a WALSlotsArgs) Args() []any { return []any{a.Table, a.Slot} }

// walRelayStreams is true when pgoutput slot s of the current database is
// a WAL relay's for table (an expression of its oid): the slot is named as
// a publication that carries the table, or in the marker a WAL relay keeps
// in such a publication's comment.
func walRelayStreams(table string) string {
	return `EXISTS (SELECT 1 FROM pg_publication p WHERE ` + publicationCarries(table) + ` AND (p.pubname = s.slot_name
        OR substring(obj_description(p.oid, 'pg_publication') FROM '^txoutbox: (?:initialising )?slot (\S+)') = s.slot_name))`
}

// publicationCarries is true when publication p (a row of pg_publication)
// carries the changes of table rel (an expression of its oid): it is FOR
// ALL TABLES, or it lists the table or one of its partition ancestors, or
// the schema of one of them (FOR TABLES IN SCHEMA, PostgreSQL 15; read
// through pg_depend, as pg_publication_namespace does not exist on 14).
// A partitioned table is carried by a publication that lists it even
// without publish_via_partition_root, whose slot streams its rows as its
// partitions' (pg_get_publication_tables then listed the partitions only,
// and a check of the root found nothing). It
// reads only catalog rows under the statement's snapshot, as
// pg_get_publication_tables does not: that looks the publication up by
// name in the current catalog, so a publication dropped after the
// statement's snapshot was taken (any DROP PUBLICATION running alongside,
// or since a REPEATABLE READ writer's transaction began) failed the
// writer's or the operator's statement. Schema version 11's trigger has
// the same test.
func publicationCarries(rel string) string {
	self := `(SELECT ` + rel + ` UNION ALL SELECT relid FROM pg_partition_ancestors(` + rel + `))`
	return `(p.puballtables
        OR EXISTS (SELECT 1 FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid IN ` + self + `)
        OR EXISTS (SELECT 1 FROM pg_depend d JOIN pg_depend dn ON dn.classid = d.classid AND dn.objid = d.objid
          WHERE d.classid = to_regclass('pg_catalog.pg_publication_namespace') AND d.refclassid = 'pg_catalog.pg_publication'::regclass
            AND d.refobjid = p.oid AND dn.refclassid = 'pg_catalog.pg_namespace'::regclass
            AND dn.refobjid IN (SELECT c.relnamespace FROM pg_class c WHERE c.oid IN ` + self + `)))`
}

// OpsTimeouts runs first in every operator transaction: a statement or a
// lock wait longer than $1 fails instead of stalling the operator, and a
// session left idle in the transaction (a tool frozen or cut off) is ended,
// releasing the rows it locked, which relays would otherwise wait behind.
const OpsTimeouts = `SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $1, true),
       set_config('idle_in_transaction_session_timeout', $1, true)`

// OpsLocks lists the sessions that hold or wait for a lock on the table
// (any partition) or its companions that the relays' statements wait
// behind, SHARE or stronger (ALTER TABLE, VACUUM FULL, CREATE INDEX,
// TRUNCATE, LOCK TABLE take one), the longest first: each one's pid, the
// relation (schema.name), the lock mode, whether it is granted (a session still waiting
// for one holds the relays back too: they queue behind it), its
// application_name and state, for how many seconds it has held the lock
// (its transaction's age) or waited for it, and the first 200 characters
// of its query. It reads pg_locks and pg_stat_activity, taking no lock on
// the tables, so it answers while they are locked.
const OpsLocks = `
SELECT l.pid, n.nspname || '.' || c.relname, l.mode, l.granted,
       coalesce(a.application_name, ''), coalesce(a.state, ''),
       coalesce(extract(epoch FROM now() - CASE WHEN l.granted THEN a.xact_start ELSE l.waitstart END), 0)::float8,
       left(coalesce(a.query, ''), 200)
FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
     LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
  AND l.pid IS DISTINCT FROM pg_backend_pid()
  AND l.relation IN (SELECT to_regclass(r) FROM unnest(ARRAY[{{tableliteral}}, {{relaysliteral}}, {{shardsliteral}}, {{floorliteral}}]) r
                     UNION ALL
                     SELECT relid FROM pg_partition_tree(to_regclass({{tableliteral}})))
ORDER BY l.granted DESC, 7 DESC, l.pid`

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
// ShardsInHandover), among the first $1 unpublished rows in id order. A
// claim walks each shard in id order, so the rows a previous owner still
// holds are the oldest of their shard; behind a backlog of other shards
// older than $1 rows they are not seen, which the operators' view accepts
// (the relays decide by ShardsInHandover). Like it, it reads $1 entries of
// the claim index at most, whatever the backlog.
const OpsHandovers = `SELECT DISTINCT w.shard FROM (
    SELECT o.shard, o.lease_owner, o.lease_expires_at
    FROM {{table}} o
    WHERE o.state IN ('pending', 'claimed')
    ORDER BY o.id
    LIMIT $1
) w JOIN {{shards}} s ON s.shard = w.shard
WHERE w.lease_owner IS NOT NULL AND w.lease_expires_at > now()
  AND w.lease_owner IS DISTINCT FROM s.owner
  AND w.lease_owner IN (SELECT id FROM {{relays}})
ORDER BY 1`

// OpsHandoverWindow is OpsHandovers's $1: ten default claim batches.
const OpsHandoverWindow = 10_000

// OpsSnapshot reads what a console samples over time: backlog
// (BacklogCount), the creation time of the oldest unpublished row
// (OldestUnpublished), the dead count (DeadCount), both counted up to $1
// (CountArgs) and estimated beyond, the highest row id (the primary key's
// last entry, which counts the events written) and the database clock.
const OpsSnapshot = `
SELECT
    ` + BacklogCount + `,
    ` + OldestUnpublished + `,
    ` + DeadCount + `,
    (SELECT coalesce(max(id), 0) FROM {{table}}),
    now()`

// OpsSnapshotScheduled is OpsSnapshot with the scheduled rows
// (ScheduledCount) and the next one's due time (NextScheduled) beside it,
// in one snapshot, so the backlog they are taken out of is the one they
// were counted in, and the oldest due row not held behind a scheduled one
// (OldestDue).
const OpsSnapshotScheduled = `SELECT s.*, ` + ScheduledCount + `, ` + NextScheduled + `, ` + OldestDue + ` FROM (` + OpsSnapshot + `) s`

// lookup finds the rows whose column col equals $1, newest first, at most
// $3, on indexes only: the unpublished ones on the aggregate index (by
// aggregate, schema version 5) or the event index (by event id, version
// 6), the dead ones on the dead aggregate index or the dead event index,
// and the published ones among the newest $2 rows of the primary key. It
// reads the key's rows and $2 index entries, whatever the table holds.
// Without an index on col over every row (which would cost each insert
// and publish one more index write), an older published row is found by
// its id only.
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

// OpsLookupEventID finds the rows of an event id (see lookup); the event
// indexes (schema version 6) serve its unpublished and dead ones.
var OpsLookupEventID = lookup("event_id", "::uuid")

// LookupArgs binds OpsLookupAggregate and OpsLookupEventID.
type LookupArgs struct {
	Key    string // $1: the aggregate id, or the event id as text
	Recent int    // $2: how many of the newest rows to search for published ones
	Limit  int    // $3: the most rows returned
}

// Args returns the parameters in order.
func (a LookupArgs) Args() []any { return []any{a.Key, a.Recent, a.Limit} }
