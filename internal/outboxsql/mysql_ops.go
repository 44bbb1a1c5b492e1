package outboxsql

import (
	"strings"
	"time"
)

// Operators' statements on MySQL and MariaDB: the counterparts of ops.go's
// (package outboxadmin), with the same contracts, on the MySQL schema
// (migrations/mysql/outbox). Where one differs from its PostgreSQL
// counterpart, its doc comment says how and why. What holds for all:
//
//   - An operator transaction is READ COMMITTED, as a claim is: its locking
//     reads then take no gap or next-key locks on the ranges they walk
//     (under REPEATABLE READ, locking the dead letters would lock the gaps
//     of outbox_prune_idx that a failure making a row dead inserts into),
//     and InnoDB releases at once the rows a locking read reads but does
//     not return.
//   - Lists of ids and aggregates are bound one placeholder each (no
//     arrays): the builders take their lengths, and a caller splits a
//     longer list into statements of at most MySQLOpsMaxIDs in the same
//     transaction.
//   - No RETURNING: what PostgreSQL's statement returns is read by a locking
//     read of the same rows before the change (MySQLOpsReplayLock).
//   - The claim gate is the claim floor's row, taken FOR UPDATE
//     (MySQLOpsClaimGate), not an advisory lock; there is no NOTIFY (relays
//     poll: no OpsWake), no WAL relay (no OpsWALGate, OpsWALSlots), and no
//     prune lock (OpsPruneLock; see MySQLOpsReplayLock).
//   - There is no next_attempt_at column: an operator's "next attempt" is
//     computed (mysqlNextAttempt).
//   - Times come back as DATETIME in UTC: scan them with MySQLTime (or with
//     parseTime=true and loc=UTC in the DSN).

// MySQLOpsMaxIDs is the most ids (or aggregates) one operator statement
// binds: a retry, drop or replay of more runs several statements in one
// transaction, well under MySQL's 65,535 placeholders per statement.
const MySQLOpsMaxIDs = 5000

// mysqlNextAttempt is PostgreSQL's next_attempt_at as operators see it,
// from the columns the MySQL schema has: the lease's end for a claimed
// row, else the end of its backoff (retry_at, kept by a failure that made
// it dead too) or the time it became due (due_at: created_at, or a later
// not_before), whichever is later. MySQLNeverRetried is earlier than any.
const mysqlNextAttempt = `CASE WHEN lane > 0 AND lease_owner <> ` + MySQLNoLeaseOwner + ` THEN lease_expires_at ELSE GREATEST(retry_at, due_at) END`

// mysqlLeaseHolder is who holds a row's lease as operators see it: the
// outbox stores a key of the holder's token (MySQLLeaseKey), so this is
// the relay whose id has that key, or the key in hex when no relay in the
// relays table has it (its holder left); empty when no one holds it.
const mysqlLeaseHolder = `CASE WHEN lease_owner = ` + MySQLNoLeaseOwner + ` THEN ''
       ELSE COALESCE((SELECT r.id FROM {{relays}} r WHERE ` + MySQLRelayLeaseKey + ` = lease_owner), LOWER(HEX(lease_owner))) END`

// MySQLStateColumn is StateColumn on MySQL: "claimed" for an unpublished
// row a relay holds under a lease, live or expired (lease_owner is not
// MySQLNoLeaseOwner).
const MySQLStateColumn = `CASE WHEN state IN ('pending', 'claimed') AND lease_owner <> ` + MySQLNoLeaseOwner + ` THEN 'claimed' ELSE state END`

// mysqlOpsRowColumns is opsRowColumns on MySQL: what an operator sees of a
// row, in the same order (outboxadmin's scanRow), with the state as
// MySQLStateColumn gives it, and published_at NULL until published.
// Times are DATETIME (MySQLTime); aggregate_id is bytes.
const mysqlOpsRowColumns = `id, event_id, topic, aggregate_type, aggregate_id, event_type, content_type,
       LENGTH(payload), CAST(headers AS CHAR), created_at, ` + MySQLStateColumn + `, attempts, ` + mysqlNextAttempt + `,
       COALESCE(last_error, ''), NULLIF(published_at, '` + MySQLUnpublished + `'), ` + mysqlLeaseHolder

// The dead-letter selections (MySQLOpsDeadList, MySQLOpsDeadCount,
// MySQLOpsDeadLock) take the filters of DeadArgs, and come in one form per
// set of filters given (DeadFilters) and number of ids, which names only
// those and binds them in one order (MySQLDeadArgs). The MySQL schema has
// fewer indexes for them than PostgreSQL's (no dead topic, type or
// creation index, and no partial index: lane is 0 for published and
// dead rows alike), so what a form reads is, by its leading filter:
//
//   - ids: the rows given, on the primary key.
//   - aggregate: the aggregate's published and dead rows above the page's
//     start, in id order on outbox_aggregate_idx (aggregate_id, lane 0,
//     id), until the page is full: bounded by the aggregate's rows, not by
//     the page (PostgreSQL's dead aggregate index holds dead rows only).
//   - otherwise (no filter, topic, event type, creation window): the dead
//     rows above the page's start, in id order on outbox_prune_idx
//     (state, published_at, id: a dead row's published_at is
//     MySQLUnpublished, so state = 'dead' AND published_at =
//     MySQLUnpublished is one range in id order),
//     until the page is full. With no filter, or a filter
//     most dead rows match, that is the page; a filter few match reads
//     the dead rows between its matches, up to every dead row above the
//     start. No index of this schema gives dead rows by topic, type or
//     creation time, so these cannot be bounded by their page here.
//
// Every form reads no published row but, led by an aggregate, that
// aggregate's.

// mysqlDeadLead is the index the filters f lead on, and the condition
// that bounds its range beside state = 'dead'.
func mysqlDeadLead(f DeadFilters) (index, cond string) {
	switch {
	case f&DeadIDs != 0:
		return "PRIMARY", ""
	case f&DeadAggregate != 0:
		return "{{index aggregate}}", " AND lane = 0"
	}
	return "{{index prune}}", " AND published_at = '" + MySQLUnpublished + "'"
}

// mysqlDeadWhere is the FROM and WHERE of the dead rows the filters f
// select, ids ids given, then " AND id > ?" with after. Each set filter's
// parameters come in DeadFilters' order (MySQLDeadArgs), after's last.
// Each leading index gives its rows in id order (its equalities, lane =
// 0 or published_at = MySQLUnpublished among them, fix the columns
// before id), so ORDER BY id ... LIMIT stops at the page with no sort
// (MariaDB sorts if the order names lane).
func mysqlDeadWhere(f DeadFilters, ids int, after bool) string {
	index, lead := mysqlDeadLead(f)
	var b strings.Builder
	b.WriteString("FROM {{table}} FORCE INDEX (" + index + ")\nWHERE state = 'dead'" + lead)
	if f&DeadIDs != 0 {
		if ids < 1 {
			// Ids given, none of them: no row (id IN () is no SQL).
			b.WriteString(" AND FALSE")
		} else {
			b.WriteString(" AND id IN (" + mysqlPlaceholders(ids) + ")")
		}
	}
	for _, c := range []struct {
		f    DeadFilters
		cond string
	}{
		{DeadTopic, "topic = ?"}, {DeadAggregate, "aggregate_id = ?"}, {DeadType, "event_type = ?"},
		{DeadSince, "created_at >= ?"}, {DeadUntil, "created_at < ?"},
	} {
		if f&c.f != 0 {
			b.WriteString("\n  AND " + c.cond)
		}
	}
	if after {
		b.WriteString("\n  AND id > ?")
	}
	return b.String()
}

// MySQLOpsDeadList is OpsDeadList on MySQL: the dead rows the filters f
// (ids of them given) select, in id order, above a row id, at most a page
// of them. What it reads is its leading filter's (see above). Binds
// MySQLDeadListArgs.
func MySQLOpsDeadList(n Names, f DeadFilters, ids int) string {
	return n.Render(`SELECT ` + mysqlOpsRowColumns + `
` + mysqlDeadWhere(f, ids, true) + `
ORDER BY id
LIMIT ?`)
}

// MySQLOpsDeadCount is OpsDeadCount on MySQL: the dead rows the filters f
// select, counted up to a cap, so a count of the cap means at least that
// many. Binds MySQLDeadCountArgs.
func MySQLOpsDeadCount(n Names, f DeadFilters, ids int) string {
	return n.Render(`SELECT COUNT(*) FROM (SELECT 1 ` + mysqlDeadWhere(f, ids, false) + `
ORDER BY id LIMIT ?) s`)
}

// MySQLOpsDeadLock is OpsDeadLock on MySQL: it locks the dead rows the
// filters f select, in id order, for a retry or drop in the same
// transaction (READ COMMITTED: the rows it reads on the leading index and
// does not return are released at once). It waits for a session that
// holds one of them: a failure making it dead, another operator. Binds
// MySQLDeadArgs.
func MySQLOpsDeadLock(n Names, f DeadFilters, ids int) string {
	return n.Render(`SELECT ` + mysqlOpsRowColumns + `
` + mysqlDeadWhere(f, ids, false) + `
ORDER BY id
FOR UPDATE`)
}

// MySQLDeadArgs binds the filters of MySQLOpsDeadLock (and, with a page or
// a cap, MySQLOpsDeadList and MySQLOpsDeadCount) built for a.Filters()
// and len(a.IDs): only those set, in DeadFilters' order.
type MySQLDeadArgs struct {
	DeadArgs
}

// Args returns the parameters in order.
func (a MySQLDeadArgs) Args() []any {
	args := make([]any, 0, len(a.IDs)+7)
	for _, id := range a.IDs {
		args = append(args, id)
	}
	f := a.Filters()
	for _, p := range []struct {
		f DeadFilters
		v any
	}{
		{DeadTopic, a.Topic}, {DeadAggregate, []byte(a.Aggregate)}, {DeadType, a.EventType},
		{DeadSince, a.Since.UTC()}, {DeadUntil, a.Until.UTC()},
	} {
		if f&p.f != 0 {
			args = append(args, p.v)
		}
	}
	return args
}

// MySQLDeadListArgs binds MySQLOpsDeadList: the filters, then a page.
type MySQLDeadListArgs struct {
	DeadArgs
	After int64 // the page starts after this id
	Limit int   // the most rows of a page
}

// Args returns the parameters in order.
func (a MySQLDeadListArgs) Args() []any {
	return append(MySQLDeadArgs{a.DeadArgs}.Args(), a.After, a.Limit)
}

// MySQLDeadCountArgs binds MySQLOpsDeadCount: the filters, then how far
// to count.
type MySQLDeadCountArgs struct {
	DeadArgs
	Cap int
}

// Args returns the parameters in order.
func (a MySQLDeadCountArgs) Args() []any { return append(MySQLDeadArgs{a.DeadArgs}.Args(), a.Cap) }

// MySQLOpsRow is OpsRow on MySQL: one row by id, in any state, with its
// payload. Binds MySQLOpsRowArgs.
const MySQLOpsRow = `SELECT ` + mysqlOpsRowColumns + `, payload FROM {{table}} WHERE id = ?`

// MySQLOpsRowArgs binds MySQLOpsRow.
type MySQLOpsRowArgs struct {
	ID int64
}

// Args returns the parameters in order.
func (a MySQLOpsRowArgs) Args() []any { return []any{a.ID} }

// MySQLOpsClaimGate is OpsClaimGate on MySQL: it takes the claim gate
// exclusively, an X lock on the claim floor's one row, which every claim
// takes shared (MySQLClaimGate). It waits for the claims in progress to
// end (up to innodb_lock_wait_timeout, MySQLOpsTimeouts) and holds new
// ones back until the operator's transaction ends, so every claim sees a
// retry or replay whole or not at all. It returns the floor; no row if the
// floor's row is missing, and then it holds nothing: the caller must fail.
// A retry takes it before MySQLOpsLockUnpublished, whose claimed rows are
// then all there are. Unlike PostgreSQL's advisory lock it is a row lock
// of the transaction: it conflicts with nothing but claims, operators and
// MySQLOpsLowerFloor, which it makes safe.
const MySQLOpsClaimGate = `SELECT floor FROM {{floor}} WHERE one = 1 FOR UPDATE`

// MySQLOpsTimeouts is OpsTimeouts on MySQL, run first in every operator
// transaction (whole seconds, at least 1; MySQLOpsTimeoutsArgs): a lock
// wait longer than the timeout fails (error 1205) instead of stalling the
// operator, and a session left idle longer (a tool frozen or cut off, in
// or out of a transaction) is closed by the server, releasing its locks.
// Both are session settings (neither server has a per-transaction form
// both accept), so they stay the connection's after the transaction until
// MySQLOpsSessionReset sets them back. The statement time limit is the
// server's own statement (MySQLServer.StatementTime): MySQL's
// (max_execution_time, SELECT only, in milliseconds) and MariaDB's
// (max_statement_time, in seconds) differ.
const MySQLOpsTimeouts = `SET SESSION innodb_lock_wait_timeout = ?, SESSION wait_timeout = ?`

// MySQLOpsSessionReset sets back to the server's defaults (DEFAULT: the
// global value) the session settings an operator's connection changed:
// MySQLOpsTimeouts' and the statement time limit of server s. An
// operator's tool often shares its application's pool, whose later users
// of the connection must not inherit a 30-second statement limit or an
// idle limit that closes it.
func MySQLOpsSessionReset(s MySQLServer) string {
	limit := "max_execution_time"
	if s == ServerMariaDB {
		limit = "max_statement_time"
	}
	return `SET SESSION innodb_lock_wait_timeout = DEFAULT, SESSION wait_timeout = DEFAULT, SESSION ` + limit + ` = DEFAULT`
}

// MySQLOpsTimeoutsArgs binds MySQLOpsTimeouts.
type MySQLOpsTimeoutsArgs struct {
	Timeout time.Duration
}

// Args returns the parameters in order.
func (a MySQLOpsTimeoutsArgs) Args() []any {
	s := max(1, int64(a.Timeout/time.Second))
	return []any{s, s}
}

// MySQLOpsLockUnpublished is OpsLockUnpublished on MySQL: it locks the
// unpublished rows (lane 1 or 2) of aggs aggregates, on
// outbox_aggregate_idx, and returns id, aggregate_id and the state
// (MySQLStateColumn: "claimed" for a row under a lease, live or expired). FOR
// UPDATE without SKIP LOCKED waits for a session holding one (a failure
// being recorded). A retry runs it holding the claim gate
// (MySQLOpsClaimGate), so no claim is in progress: the rows claimed then
// are the ones in flight, which Retried.Overtaken reports for the rows
// above a retried one. Binds MySQLIDsArgs (strings).
func MySQLOpsLockUnpublished(n Names, aggs int) string {
	return n.Render(`SELECT id, aggregate_id, ` + MySQLStateColumn + `
FROM {{table}} FORCE INDEX ({{index aggregate}})
WHERE aggregate_id IN (` + mysqlPlaceholders(aggs) + `) AND lane IN (1, 2)
ORDER BY id
FOR UPDATE`)
}

// MySQLOpsRetry is OpsRetry on MySQL: it returns ids dead rows to pending,
// with attempts reset, as first attempts (retry_at MySQLNeverRetried:
// lane 1, due at once, not_before or not), and clears the lease, which
// fences the settlement of any claim of them before (a late Mark or Fail
// finds no lease to match). last_error is kept. The caller holds them
// locked (MySQLOpsDeadLock), so every id changes. Binds MySQLIDsArgs.
func MySQLOpsRetry(n Names, ids int) string {
	return n.Render(`UPDATE {{table}}
SET state = 'pending', attempts = 0, retry_at = '` + MySQLNeverRetried + `', ` + MySQLNoLease + `
WHERE id IN (` + mysqlPlaceholders(ids) + `) AND state = 'dead'`)
}

// MySQLOpsLowerFloor is OpsLowerFloor on MySQL: it lowers the claim floor
// to the lowest id a retry or replay returns to pending, in its
// transaction, which holds the floor's row (MySQLOpsClaimGate), so the
// claims walk the rows from there (a first attempt below the floor is
// never a claim's candidate, and would hold its aggregate back for good),
// and bumps the floor's generation. Binds MySQLLowerFloorArgs.
const MySQLOpsLowerFloor = `UPDATE {{floor}} SET floor = LEAST(floor, COALESCE(?, floor)), gen = gen + 1 WHERE one = 1`

// MySQLLowerFloorArgs binds MySQLOpsLowerFloor: the lowest of IDs (none:
// the floor stays, the generation is bumped, as on PostgreSQL).
type MySQLLowerFloorArgs struct {
	IDs []int64
}

// Args returns the parameters in order.
func (a MySQLLowerFloorArgs) Args() []any {
	if len(a.IDs) == 0 {
		return []any{nil}
	}
	low := a.IDs[0]
	for _, id := range a.IDs[1:] {
		low = min(low, id)
	}
	return []any{low}
}

// MySQLOpsDrop is OpsDrop on MySQL: it deletes ids rows that are dead.
// Binds MySQLIDsArgs.
func MySQLOpsDrop(n Names, ids int) string {
	return n.Render(`DELETE FROM {{table}} WHERE id IN (` + mysqlPlaceholders(ids) + `) AND state = 'dead'`)
}

// MySQLOpsReplaySelect is OpsReplaySelect on MySQL: the published rows
// published at or after a time, of a topic and an aggregate when given,
// read on outbox_prune_idx (state, published_at) from that time on,
// however many published rows are retained before it, in id order.
// Unlike PostgreSQL's it does not group them by aggregate: MariaDB
// computes MIN(id) OVER (PARTITION BY aggregate_id) by reading the whole
// partition again for each row (seconds for one aggregate of 5,000 rows),
// so the caller groups them, each aggregate's rows in id order and the
// aggregates in the order of their first row, as it reads them. Columns:
// aggregate_id (bytes), id, topic. Binds MySQLReplaySelectArgs.
const MySQLOpsReplaySelect = `SELECT aggregate_id, id, topic
FROM {{table}} FORCE INDEX ({{index prune}})
WHERE state = 'published' AND published_at >= ?
  AND (? IS NULL OR topic = ?)
  AND (? IS NULL OR aggregate_id = ?)
ORDER BY id`

// MySQLReplaySelectArgs binds MySQLOpsReplaySelect; an empty Topic or
// Aggregate is unset (NULL). Each is bound twice: MySQL's placeholders are
// positional.
type MySQLReplaySelectArgs struct {
	Since     time.Time
	Topic     string
	Aggregate string
}

// Args returns the parameters in order.
func (a MySQLReplaySelectArgs) Args() []any {
	var agg any
	if a.Aggregate != "" {
		agg = []byte(a.Aggregate)
	}
	topic := nullString(a.Topic)
	return []any{a.Since.UTC(), topic, topic, agg, agg}
}

// MySQLOpsReplayLock locks those of ids rows (whole aggregates' rows)
// that are still published, in id order, and returns their id and topic:
// what OpsReplay's RETURNING gives on PostgreSQL, read before the change
// (MySQLOpsReplay), which then changes every row returned. It stands in
// for OpsPruneLock too: a prune's DELETE of a row it locked waits for the
// replay's commit and, re-reading the row, finds it no longer published;
// a row deleted first is not returned. (A MySQL prune must test state in
// its DELETE.) Run under the claim gate. Binds MySQLIDsArgs.
func MySQLOpsReplayLock(n Names, ids int) string {
	return n.Render(`SELECT id, topic FROM {{table}}
WHERE id IN (` + mysqlPlaceholders(ids) + `) AND state = 'published'
ORDER BY id
FOR UPDATE`)
}

// MySQLOpsReplay is OpsReplay on MySQL: it returns ids rows to pending,
// as first attempts due at once with attempts reset, if they are still
// published, and clears published_at (MySQLUnpublished) and the lease,
// so no settlement of an earlier claim of them (a late Mark with its
// version) lands on the replayed row. It returns nothing: MySQLOpsReplayLock read the rows it
// changes. Binds MySQLIDsArgs.
func MySQLOpsReplay(n Names, ids int) string {
	return n.Render(`UPDATE {{table}}
SET state = 'pending', attempts = 0, retry_at = '` + MySQLNeverRetried + `', published_at = '` + MySQLUnpublished + `',
    ` + MySQLNoLease + `
WHERE id IN (` + mysqlPlaceholders(ids) + `) AND state = 'published'`)
}

// MySQLOpsLookupEventID is OpsLookupEventID on MySQL: the rows of an event
// id in any state, newest first, at most a limit, on outbox_event_idx,
// which covers every row: it finds published rows of any age, where
// PostgreSQL's finds them among the newest LookupArgs.Recent rows only.
// Binds MySQLLookupArgs.
const MySQLOpsLookupEventID = `SELECT ` + mysqlOpsRowColumns + `
FROM {{table}} FORCE INDEX ({{index event}})
WHERE event_id = ?
ORDER BY id DESC
LIMIT ?`

// MySQLOpsLookupAggregate is OpsLookupAggregate on MySQL: an aggregate's
// rows in any state, newest first, at most a limit. outbox_aggregate_idx
// (aggregate_id, lane, id) covers every row, published and dead ones in
// its lane 0: it reads each lane's newest rows, a limit of each, so
// published rows of any age are found, at the cost of three limits'
// entries. Binds MySQLLookupArgs.
const MySQLOpsLookupAggregate = `SELECT ` + mysqlOpsRowColumns + `
FROM {{table}}
WHERE id IN (SELECT id FROM (
    (SELECT id FROM {{table}} FORCE INDEX ({{index aggregate}}) WHERE aggregate_id = ? AND lane = 0 ORDER BY id DESC LIMIT ?)
    UNION ALL
    (SELECT id FROM {{table}} FORCE INDEX ({{index aggregate}}) WHERE aggregate_id = ? AND lane = 1 ORDER BY id DESC LIMIT ?)
    UNION ALL
    (SELECT id FROM {{table}} FORCE INDEX ({{index aggregate}}) WHERE aggregate_id = ? AND lane = 2 ORDER BY id DESC LIMIT ?)
) k)
ORDER BY id DESC
LIMIT ?`

// MySQLLookupArgs binds MySQLOpsLookupEventID (the event id as canonical
// text) and MySQLOpsLookupAggregate (the aggregate id).
type MySQLLookupArgs struct {
	Aggregate bool // MySQLOpsLookupAggregate's parameters
	Key       string
	Limit     int
}

// Args returns the parameters in order.
func (a MySQLLookupArgs) Args() []any {
	if !a.Aggregate {
		return []any{a.Key, a.Limit}
	}
	k := []byte(a.Key)
	return []any{k, a.Limit, k, a.Limit, k, a.Limit, a.Limit}
}

// MySQLOpsCounts is OpsSnapshotScheduled on MySQL, the figures status and
// the console show, in one statement: the unpublished rows (lane 1 or 2,
// on outbox_lane_idx), the dead rows (on outbox_prune_idx) and the
// scheduled rows (unpublished, with a not_before still to come, on
// outbox_due_idx from now on), each counted up to a cap (MySQLCountArgs,
// Counts 3: a count of the cap means at least that many); the earliest
// time an unpublished row became due (OldestUnpublished: the lag), one
// entry of outbox_due_idx per lane; when the next scheduled row is due;
// the highest row id; the database clock (UTC); and the earliest time a
// due row not held behind a scheduled row of its aggregate became due
// (OldestDue: the due lag), walked with no cap as txoutbox.ReadStats
// walks it (MySQLStats). NULL times when there is none. Beyond the cap
// PostgreSQL estimates the backlog from ids and the dead and scheduled
// counts from its statistics; here they stay at the cap (CountsOf marks
// them estimated), as InnoDB's row estimates are too rough to add.
const MySQLOpsCounts = `SELECT
    (SELECT COUNT(*) FROM (SELECT 1 FROM {{table}} FORCE INDEX ({{index lane}}) WHERE lane IN (1, 2) LIMIT ?) u),
    ` + mysqlDeadCount + `,
    (SELECT COUNT(*) FROM (SELECT 1 FROM {{table}} FORCE INDEX ({{index due}})
        WHERE lane IN (1, 2) AND due_at > UTC_TIMESTAMP(6) AND not_before > UTC_TIMESTAMP(6) LIMIT ?) s),
    LEAST(COALESCE(` + mysqlOldestDue1 + `, ` + mysqlOldestDue2 + `), COALESCE(` + mysqlOldestDue2 + `, ` + mysqlOldestDue1 + `)),
    ` + mysqlNextScheduled + `,
    (SELECT COALESCE(MAX(id), 0) FROM {{table}}),
    UTC_TIMESTAMP(6),
    ` + mysqlOldestDue

// MySQLOpsLag is StatsLag on MySQL, what an operator's Lag reads: the
// earliest time an unpublished row became due (OldestUnpublished: one
// entry of outbox_due_idx per lane) and the database clock (UTC); NULL
// when no row is unpublished.
const MySQLOpsLag = `SELECT ` + mysqlOldestUnpublished + `, UTC_TIMESTAMP(6)`

// mysqlOldestDue1 and mysqlOldestDue2 are the earliest due_at of the first
// attempts and of the retries: one entry of outbox_due_idx each (a MIN on
// an equality prefix). LEAST with a NULL is NULL on MySQL, hence the
// COALESCEs around them.
const (
	mysqlOldestDue1 = `(SELECT MIN(due_at) FROM {{table}} FORCE INDEX ({{index due}}) WHERE lane = 1)`
	mysqlOldestDue2 = `(SELECT MIN(due_at) FROM {{table}} FORCE INDEX ({{index due}}) WHERE lane = 2)`
)

// mysqlNextScheduled is when the next scheduled row is due, of both
// lanes (see mysqlOldestDue1 for the COALESCEs).
const mysqlNextScheduled = `LEAST(COALESCE(` + mysqlNextScheduled1 + `, ` + mysqlNextScheduled2 + `), COALESCE(` + mysqlNextScheduled2 + `, ` + mysqlNextScheduled1 + `))`

// mysqlNextScheduled1 and mysqlNextScheduled2 are the due time of the
// next scheduled first attempt and retry: outbox_due_idx from now on, up
// to the first row with a not_before to come (due_at is its not_before,
// unless created_at is later still).
const (
	mysqlNextScheduled1 = `(SELECT due_at FROM {{table}} FORCE INDEX ({{index due}})
        WHERE lane = 1 AND due_at > UTC_TIMESTAMP(6) AND not_before > UTC_TIMESTAMP(6) ORDER BY lane, due_at LIMIT 1)`
	mysqlNextScheduled2 = `(SELECT due_at FROM {{table}} FORCE INDEX ({{index due}})
        WHERE lane = 2 AND due_at > UTC_TIMESTAMP(6) AND not_before > UTC_TIMESTAMP(6) ORDER BY lane, due_at LIMIT 1)`
)

// MySQLOpsRelays is OpsRelays on MySQL: the relays with their heartbeat's
// age in seconds by the database clock.
const MySQLOpsRelays = `SELECT id, host, started_at, heartbeat_at,
       TIMESTAMPDIFF(MICROSECOND, heartbeat_at, UTC_TIMESTAMP(6)) / 1000000
FROM {{relays}}
ORDER BY id`

// MySQLOpsShards is OpsShards on MySQL: every shard and its owner, empty
// when free.
const MySQLOpsShards = `SELECT shard, COALESCE(owner, '') FROM {{shards}} ORDER BY shard`

// MySQLOpsHandovers is OpsHandovers on MySQL: the shards holding, among
// the first unpublished rows (a window, as on PostgreSQL), rows that a
// live incarnation other than the shard's owner holds under a live lease.
// The window is read on outbox_lane_idx as the claim reads it, the first
// attempts in id order and the retries in retry_at order (leased retries,
// whose retry_at has passed, come first), the window's size of each, then
// cut to the window in id order: twice the window's entries at most,
// whatever the backlog. Binds MySQLHandoversArgs.
const MySQLOpsHandovers = `SELECT DISTINCT w.shard FROM (
    SELECT id, shard, lease_owner, lease_expires_at FROM (
        (SELECT id, shard, lease_owner, lease_expires_at FROM {{table}} FORCE INDEX ({{index lane}}) WHERE lane = 1 ORDER BY lane, retry_at, id LIMIT ?)
        UNION ALL
        (SELECT id, shard, lease_owner, lease_expires_at FROM {{table}} FORCE INDEX ({{index lane}}) WHERE lane = 2 ORDER BY lane, retry_at, id LIMIT ?)
    ) u
    ORDER BY id
    LIMIT ?
) w JOIN {{shards}} s ON s.shard = w.shard
WHERE w.lease_expires_at > UTC_TIMESTAMP(6)
  AND w.lease_owner IN (SELECT ` + MySQLRelayLeaseKey + ` FROM {{relays}} r WHERE s.owner IS NULL OR r.id <> s.owner)
ORDER BY 1`

// MySQLHandoversArgs binds MySQLOpsHandovers.
type MySQLHandoversArgs struct {
	Window int // OpsHandoverWindow
}

// Args returns the parameters in order.
func (a MySQLHandoversArgs) Args() []any { return []any{a.Window, a.Window, a.Window} }

// mysqlOpsStatements is the statements above, rendered at sizes the
// grammar test parses (MySQLStatements): each dead-letter form with three
// ids or none.
func mysqlOpsStatements(n Names) map[string]string {
	out := map[string]string{
		"MySQLOpsRow":                 n.Render(MySQLOpsRow),
		"MySQLOpsClaimGate":           n.Render(MySQLOpsClaimGate),
		"MySQLOpsTimeouts":            MySQLOpsTimeouts,
		"MySQLOpsSessionReset":        MySQLOpsSessionReset(ServerMySQL),
		"MySQLOpsSessionReset(maria)": MySQLOpsSessionReset(ServerMariaDB),
		"MySQLOpsLockUnpublished(1)":  MySQLOpsLockUnpublished(n, 1),
		"MySQLOpsLockUnpublished(3)":  MySQLOpsLockUnpublished(n, 3),
		"MySQLOpsRetry(3)":            MySQLOpsRetry(n, 3),
		"MySQLOpsLowerFloor":          n.Render(MySQLOpsLowerFloor),
		"MySQLOpsDrop(3)":             MySQLOpsDrop(n, 3),
		"MySQLOpsReplaySelect":        n.Render(MySQLOpsReplaySelect),
		"MySQLOpsReplayLock(3)":       MySQLOpsReplayLock(n, 3),
		"MySQLOpsReplay(3)":           MySQLOpsReplay(n, 3),
		"MySQLOpsLookupEventID":       n.Render(MySQLOpsLookupEventID),
		"MySQLOpsLookupAggregate":     n.Render(MySQLOpsLookupAggregate),
		"MySQLOpsCounts":              n.Render(MySQLOpsCounts),
		"MySQLOpsLag":                 n.Render(MySQLOpsLag),
		"MySQLOpsRelays":              n.Render(MySQLOpsRelays),
		"MySQLOpsShards":              n.Render(MySQLOpsShards),
		"MySQLOpsHandovers":           n.Render(MySQLOpsHandovers),
	}
	for f := DeadFilters(0); f < DeadForms; f++ {
		ids := 0
		if f&DeadIDs != 0 {
			ids = 3
		}
		key := "(" + string(rune('0'+f/10)) + string(rune('0'+f%10)) + ")"
		out["MySQLOpsDeadList"+key] = MySQLOpsDeadList(n, f, ids)
		out["MySQLOpsDeadCount"+key] = MySQLOpsDeadCount(n, f, ids)
		out["MySQLOpsDeadLock"+key] = MySQLOpsDeadLock(n, f, ids)
	}
	return out
}
