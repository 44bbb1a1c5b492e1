package outboxsql

import (
	"strings"
	"time"
)

// The relay's other statements on MySQL and MariaDB: membership and shard
// ownership, pruning, the stats readings, and the session's time limits.
// Each keeps the contract of its PostgreSQL counterpart in relay.go; where
// MySQL makes it take another shape, its comment says how and why. Three
// shapes recur:
//
//   - No RETURNING: a statement that returns what it changed becomes a
//     locking read of the ids, then a change by id, in the caller's
//     transaction (ReplacePredecessors, ForgetStaleRelays), or a change,
//     then a read (AcquireShards).
//   - No arrays: lists are bound one placeholder each, and the builders
//     take their lengths, as mysql_relay.go's do.
//   - No partial indexes: the lane column's indexes, pinned with FORCE
//     INDEX, stand in for them.
//
// The membership and shard statements are to run in READ COMMITTED
// transactions, as the claim does. The relays and shards tables have no
// index but their primary keys, so statements that select by name,
// heartbeat or owner scan them (a few rows, and 256): under REPEATABLE
// READ, InnoDB's default, a locking scan keeps a lock on every row it read
// until commit, and a relay's heartbeat round would hold every peer's row;
// under READ COMMITTED it keeps only the rows that match, and an UPDATE
// waits only for a locked row whose latest committed version matches.
//
// RepairRetryAt has no counterpart: the MySQL schema has no
// next_attempt_at. A row's retry_at is its one due time, which the claim
// reads and the writers set (MySQLInsert from NotBefore, MySQLFail from
// the backoff), so no row can be due by one column and read by another.
//
// The schema version a relay checks at start is read by migrations'
// Migrator.Check, which on MySQL runs MySQLVersionsRead: no statement here.

// MySQLRegister records a new incarnation, as Register does; the MySQL
// schema's started_at and heartbeat_at have no default, so it sets both
// to the database clock. Binds RegisterArgs.
const MySQLRegister = `INSERT INTO {{relays}} (id, name, host, started_at, heartbeat_at)
VALUES (?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`

// MySQLPredecessors is ReplacePredecessors' first half: it locks the other
// incarnations of a name (an earlier run of a relay restarted under the
// same id) and returns their ids, which MySQLDeleteRelays then deletes in
// the same transaction, so their shards and claims are taken over at once
// instead of after StaleAfter. MySQL has no DELETE ... RETURNING; deleting
// by the ids locked, not by the condition again, deletes exactly the rows
// returned (READ COMMITTED takes no gap locks, so a row of the name
// inserted between the two statements would match the condition). Binds
// ReplaceArgs.
const MySQLPredecessors = `SELECT id FROM {{relays}} WHERE name = ? AND id <> ? FOR UPDATE`

// MySQLStaleRelays is ForgetStaleRelays' first half: it locks the relays
// whose heartbeat is older than StaleAfter and returns their ids, which
// MySQLDeleteRelays then deletes in the same transaction; their shards
// become free and their claims can be taken over. A row another
// transaction holds locked is skipped, not waited for (SKIP LOCKED), as on
// PostgreSQL: a peer frozen while deleting it, or registering in its
// place, must not stop every relay's heartbeat round. Binds
// MySQLStaleArgs.
const MySQLStaleRelays = `SELECT id FROM {{relays}} WHERE heartbeat_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
FOR UPDATE SKIP LOCKED`

// MySQLStaleArgs binds MySQLStaleRelays.
type MySQLStaleArgs struct {
	StaleAfter time.Duration
}

// Args returns the parameters in order.
func (a MySQLStaleArgs) Args() []any { return []any{a.StaleAfter.Microseconds()} }

// MySQLDeleteRelays deletes ids incarnations by id (ids at least 1: with
// none there is nothing to run): the rows MySQLPredecessors or
// MySQLStaleRelays locked, in their transaction. Binds MySQLIDsArgs
// (strings).
func MySQLDeleteRelays(n Names, ids int) string {
	return n.Render(`DELETE FROM {{relays}} WHERE id IN (` + mysqlPlaceholders(ids) + `)`)
}

// MySQLOtherIncarnations counts the live incarnations of a name other than
// own of the relay's own (heartbeats younger than StaleAfter), as
// OtherIncarnations does. The own ids are bound one placeholder each (no
// arrays; JSON_TABLE, which both servers have, would only move the list
// into a string). Binds MySQLOtherIncarnationsArgs.
func MySQLOtherIncarnations(n Names, own int) string {
	notOwn := ""
	if own > 0 {
		notOwn = " AND id NOT IN (" + mysqlPlaceholders(own) + ")"
	}
	return n.Render(`SELECT COUNT(*) FROM {{relays}}
WHERE name = ?` + notOwn + ` AND heartbeat_at >= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`)
}

// MySQLOtherIncarnationsArgs binds MySQLOtherIncarnations.
type MySQLOtherIncarnationsArgs struct {
	Name       string
	Own        []string // as many as the statement was built for
	StaleAfter time.Duration
}

// Args returns the parameters in order.
func (a MySQLOtherIncarnationsArgs) Args() []any {
	args := make([]any, 0, 2+len(a.Own))
	args = append(args, a.Name)
	for _, id := range a.Own {
		args = append(args, id)
	}
	return append(args, a.StaleAfter.Microseconds())
}

// MySQLHeartbeat refreshes an incarnation's row, as Heartbeat does: no row
// affected means it was declared dead or replaced. MySQL counts the rows
// an UPDATE changed, not those it matched, unless the connection sets
// CLIENT_FOUND_ROWS: a heartbeat writing the value the row already holds
// (two in one microsecond, or a session timestamp pinned) would report
// none. So the new value is always later than the old, by a microsecond
// at least, which also keeps a heartbeat from going back with the
// server's clock. Binds MySQLOwnerArgs.
const MySQLHeartbeat = `UPDATE {{relays}} SET heartbeat_at = GREATEST(UTC_TIMESTAMP(6), heartbeat_at + INTERVAL 1 MICROSECOND) WHERE id = ?`

// MySQLOwnerArgs binds the statements that take the incarnation alone:
// MySQLHeartbeat, MySQLOwnedShards, MySQLOwnedShardList, MySQLLeaveShards
// and MySQLLeaveRelay.
type MySQLOwnerArgs struct {
	Owner string
}

// Args returns the parameters in order.
func (a MySQLOwnerArgs) Args() []any { return []any{a.Owner} }

// MySQLLiveRelays lists the live incarnations with the name shards are
// assigned by (the id where the name is empty), as LiveRelays does.
const MySQLLiveRelays = `SELECT id, CASE WHEN name = '' THEN id ELSE name END FROM {{relays}} ORDER BY id`

// MySQLReleaseShards gives up the incarnation's shards but the keep
// listed (0: every one of them), as ReleaseShards does. Binds
// MySQLShardsArgs.
func MySQLReleaseShards(n Names, keep int) string {
	notKept := ""
	if keep > 0 {
		notKept = " AND shard NOT IN (" + mysqlPlaceholders(keep) + ")"
	}
	return n.Render(`UPDATE {{shards}} SET owner = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE owner = ?` + notKept)
}

// MySQLAcquireShards is AcquireShards' first half: it takes the shards
// listed that are free or owned by an incarnation that is gone (not in the
// relays table). shards is at least 1: with none to take, a round runs
// MySQLOwnedShardList alone. MySQLOwnedShardList, in the same
// transaction, then returns the shards the incarnation owns afterwards:
// MySQL has no UPDATE in a WITH clause and no RETURNING. Two relays
// taking one shard at once: the second's UPDATE waits for the first's row
// lock, then tests its condition again on the version the first committed
// and passes over the shard. Binds MySQLShardsArgs.
func MySQLAcquireShards(n Names, shards int) string {
	return n.Render(`UPDATE {{shards}} SET owner = ?, updated_at = UTC_TIMESTAMP(6)
WHERE shard IN (` + mysqlPlaceholders(shards) + `)
  AND (owner IS NULL OR owner NOT IN (SELECT id FROM {{relays}}))`)
}

// MySQLShardsArgs binds MySQLReleaseShards and MySQLAcquireShards.
type MySQLShardsArgs struct {
	Owner  string
	Shards []int16 // as many as the statement was built for
}

// Args returns the parameters in order.
func (a MySQLShardsArgs) Args() []any {
	args := make([]any, 0, 1+len(a.Shards))
	args = append(args, a.Owner)
	for _, s := range a.Shards {
		args = append(args, s)
	}
	return args
}

// MySQLOwnedShardList returns the shards an incarnation owns, in order:
// AcquireShards' second half, run after MySQLAcquireShards in its
// transaction. Binds MySQLOwnerArgs.
const MySQLOwnedShardList = `SELECT shard FROM {{shards}} WHERE owner = ? ORDER BY shard`

// MySQLOwnedShards counts the shards an incarnation owns, as OwnedShards
// does. Binds MySQLOwnerArgs.
const MySQLOwnedShards = `SELECT COUNT(*) FROM {{shards}} WHERE owner = ?`

// MySQLLeaveShards releases every shard of an incarnation, so peers take
// over at once on a clean shutdown, as LeaveShards does. Binds
// MySQLOwnerArgs.
const MySQLLeaveShards = `UPDATE {{shards}} SET owner = NULL, updated_at = UTC_TIMESTAMP(6) WHERE owner = ?`

// MySQLLeaveRelay deletes an incarnation's heartbeat row, as LeaveRelay
// does. Binds MySQLOwnerArgs.
const MySQLLeaveRelay = `DELETE FROM {{relays}} WHERE id = ?`

// MySQLShardsInHandover returns which of shards shards (0: every shard)
// still hold rows claimed by another live incarnation under a valid lease
// among the rows a claim of the new owner would read first, as
// ShardsInHandover does. The MySQL claim reads two windows, not one: the
// first Window first attempts in id order and the first Window due
// retries in retry_at order (both on outbox_lane_idx), so this
// reads the same two, Window entries of each at most, whatever the
// backlog; and nothing while the incarnation is the only live one (the
// test of the relays table comes first in each). Binds MySQLHandoverArgs.
func MySQLShardsInHandover(n Names, shards int) string {
	const others = `EXISTS (SELECT 1 FROM {{relays}} WHERE id <> ?)`
	filter := mysqlShardFilter("o", shards)
	return n.Render(`SELECT DISTINCT w.shard FROM (
    (SELECT o.shard, o.lease_owner, o.lease_expires_at FROM {{table}} o FORCE INDEX ({{index lane}})
     WHERE o.lane = 1 AND ` + others + filter + `
     ORDER BY o.lane, o.retry_at, o.id LIMIT ?)
    UNION ALL
    (SELECT o.shard, o.lease_owner, o.lease_expires_at FROM {{table}} o FORCE INDEX ({{index lane}})
     WHERE o.lane = 2 AND ` + others + ` AND o.retry_at <= UTC_TIMESTAMP(6)` + filter + `
     ORDER BY o.lane, o.retry_at LIMIT ?)
) w
WHERE w.lease_owner <> ? AND w.lease_expires_at > UTC_TIMESTAMP(6)
  AND w.lease_owner IN (SELECT ` + MySQLRelayLeaseKey + ` FROM {{relays}} r)
ORDER BY w.shard`)
}

// MySQLHandoverArgs binds MySQLShardsInHandover.
type MySQLHandoverArgs struct {
	Owner  string  // the incarnation's token
	Shards []int16 // the shards to check, as many as the statement was built for
	Window int     // how many rows of each window to read, a claim's batch
}

// Args returns the parameters in order.
func (a MySQLHandoverArgs) Args() []any {
	args := make([]any, 0, 4+2*len(a.Shards))
	for range 2 {
		args = append(args, a.Owner)
		for _, s := range a.Shards {
			args = append(args, s)
		}
		args = append(args, a.Window)
	}
	return append(args, MySQLLeaseKey(a.Owner))
}

// MySQLPruneBatch is Prune's first half: the ids of up to Batch published
// rows older than Retention, oldest first, read without locking on
// outbox_prune_idx (state, published_at), where the published rows are
// in published_at order: the range it reads is the batch, however many
// dead or unpublished rows there are and however many published rows are
// retained. MySQLPrune then deletes them by id. Binds MySQLPruneArgs.
const MySQLPruneBatch = `SELECT id FROM {{table}} FORCE INDEX ({{index prune}})
WHERE state = 'published' AND published_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY state, published_at
LIMIT ?`

// MySQLPruneArgs binds MySQLPruneBatch.
type MySQLPruneArgs struct {
	Retention time.Duration // published rows older than this go
	Batch     int           // the most rows one round deletes
}

// Args returns the parameters in order.
func (a MySQLPruneArgs) Args() []any { return []any{a.Retention.Microseconds(), a.Batch} }

// MySQLPrune deletes ids rows (at least 1) that MySQLPruneBatch read, by
// primary key, testing its condition again on each: a row replayed or
// changed since the read is left alone. The two need no transaction.
// There is no PruneLock (GET_LOCK is a session's, not a transaction's):
// two relays pruning at once may read the same batch, and the second's
// DELETE waits for the first's row locks, then finds the rows gone. A
// single-table DELETE takes no index hint on either server, so the read
// that picks the batch is a statement of its own. Binds
// MySQLPruneDeleteArgs.
func MySQLPrune(n Names, ids int) string {
	return n.Render(`DELETE FROM {{table}} WHERE id IN (` + mysqlPlaceholders(ids) + `)
  AND state = 'published' AND published_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`)
}

// MySQLPruneDeleteArgs binds MySQLPrune.
type MySQLPruneDeleteArgs struct {
	IDs       []int64 // as many as the statement was built for
	Retention time.Duration
}

// Args returns the parameters in order.
func (a MySQLPruneDeleteArgs) Args() []any {
	args := make([]any, 0, 1+len(a.IDs))
	for _, id := range a.IDs {
		args = append(args, id)
	}
	return append(args, a.Retention.Microseconds())
}

// mysqlOldestUnpublished is OldestUnpublished: the earliest due_at
// (GREATEST(created_at, not_before), a stored column) of the unpublished
// rows, one entry of outbox_due_idx per lane (LEAST is NULL when either
// side is).
const mysqlOldestUnpublished = `(SELECT LEAST(COALESCE(f.d, r.d), COALESCE(r.d, f.d)) FROM
     (SELECT MIN(due_at) AS d FROM {{table}} FORCE INDEX ({{index due}}) WHERE lane = 1) f,
     (SELECT MIN(due_at) AS d FROM {{table}} FORCE INDEX ({{index due}}) WHERE lane = 2) r)`

// mysqlDueWalk is one lane's part of mysqlOldestDue, the lane's number
// between its two halves: the first due row of the lane in due_at order
// not held behind an earlier row of its aggregate scheduled for later,
// with its due time and the time it counts from.
// The probe is a scalar subquery in the WHERE, run per row in index order
// until the first row that passes (no LATERAL on MariaDB).
const (
	mysqlDueWalk = `(SELECT o.due_at AS due, GREATEST(o.due_at, COALESCE(` + mysqlHeldUntil + `, o.due_at)) AS v
      FROM {{table}} o FORCE INDEX ({{index due}})
      WHERE o.lane = `
	mysqlDueWalkEnd = ` AND o.due_at <= UTC_TIMESTAMP(6) AND COALESCE(` + mysqlHeldUntil + ` <= UTC_TIMESTAMP(6), TRUE)
      ORDER BY o.lane, o.due_at LIMIT 1)`
)

// mysqlHeldUntil is the latest not_before of the earlier rows of o's
// aggregate that wait as retries (a failed row, or one written for later),
// on outbox_aggregate_idx; NULL when there is none.
const mysqlHeldUntil = `(SELECT MAX(h.not_before) FROM {{table}} h FORCE INDEX ({{index aggregate}})
             WHERE h.aggregate_id = o.aggregate_id AND h.lane = 2 AND h.id < o.id)`

// mysqlOldestDue is OldestDue: of the two lanes' first rows not held, the
// one due first, and the time it counts from. Unlike PostgreSQL's, it
// walks each lane up to its first row not held with no cap: a LIMIT on the
// walk makes a derived table, which both servers read whole before
// filtering, so a cap would be paid on every reading instead of only when
// rows are held. With every due row held it reads them all and returns
// NULL, where PostgreSQL's returns the last due time of its capped walk;
// the statement's time limit bounds it.
const mysqlOldestDue = `(SELECT x.v FROM (` + mysqlDueWalk + `1` + mysqlDueWalkEnd + `
    UNION ALL
    ` + mysqlDueWalk + `2` + mysqlDueWalkEnd + `) x
   ORDER BY x.due LIMIT 1)`

// MySQLStatsLags is StatsLags: the earliest due time of the unpublished
// rows, that of the due rows not held behind a scheduled row
// (mysqlOldestDue), and the database clock. It takes no parameter:
// PostgreSQL's cap on the walk has no MySQL form (see mysqlOldestDue).
const MySQLStatsLags = `SELECT ` + mysqlOldestUnpublished + `,
  ` + mysqlOldestDue + `,
  UTC_TIMESTAMP(6)`

// MySQLStatsBacklogScheduled is StatsBacklogScheduled: the unpublished
// rows, counted on outbox_lane_idx up to Cap, and the scheduled ones
// among them (a not_before still to come), counted up to Cap. A scheduled
// row waits as a retry whose due_at has not come (MySQLInsert sets its
// retry_at to its not_before), so the count reads lane 2 of outbox_due_idx
// from now on, and a row's not_before to leave out one whose created_at
// alone is in the future. Neither is estimated beyond Cap: a count of Cap
// means at least Cap (which CountsOf flags as an estimate). PostgreSQL's
// estimates read the id range and the planner's statistics of partial
// indexes; information_schema.TABLES.TABLE_ROWS counts every row of the
// table, published ones too, so it estimates neither. Binds
// MySQLCountArgs.
const MySQLStatsBacklogScheduled = `SELECT
  ` + mysqlUnpublishedCount + `,
  ` + mysqlScheduledCount + ``

// mysqlUnpublishedCount and mysqlScheduledCount are
// MySQLStatsBacklogScheduled's counts, each binding its cap.
const (
	mysqlUnpublishedCount = `(SELECT COUNT(*) FROM (SELECT 1 FROM {{table}} FORCE INDEX ({{index lane}}) WHERE lane IN (1, 2) LIMIT ?) b)`
	mysqlScheduledCount   = `(SELECT COUNT(*) FROM (SELECT 1 FROM {{table}} FORCE INDEX ({{index due}})
       WHERE lane = 2 AND due_at > UTC_TIMESTAMP(6) AND not_before > UTC_TIMESTAMP(6) LIMIT ?) s)`
)

// MySQLStatsDead is StatsDead: the dead rows, counted on outbox_prune_idx
// (state, published_at, id; a dead row's published_at is
// MySQLUnpublished) up to Cap, with no estimate beyond (see
// MySQLStatsBacklogScheduled).
// Binds MySQLCountArgs.
const MySQLStatsDead = `SELECT ` + mysqlDeadCount

// mysqlDeadCount is MySQLStatsDead's count, as a scalar subquery.
const mysqlDeadCount = `(SELECT COUNT(*) FROM (SELECT 1 FROM {{table}} FORCE INDEX ({{index prune}})
       WHERE state = 'dead' AND published_at = '` + MySQLUnpublished + `' LIMIT ?) d)`

// MySQLStats is txoutbox.ReadStats on MySQL, in one statement: the
// unpublished, dead and scheduled rows counted up to a cap each
// (MySQLCountArgs, Counts 3; no estimate beyond, see
// MySQLStatsBacklogScheduled), the earliest due time of the unpublished
// rows, that of the due rows not held behind a scheduled row
// (mysqlOldestDue, whose walk has no cap), when the next scheduled row is
// due (as MySQLOpsCounts reads it), and the database clock. NULL times
// when there is none.
const MySQLStats = `SELECT
  ` + mysqlUnpublishedCount + `,
  ` + mysqlDeadCount + `,
  ` + mysqlScheduledCount + `,
  ` + mysqlOldestUnpublished + `,
  ` + mysqlOldestDue + `,
  ` + mysqlNextScheduled + `,
  UTC_TIMESTAMP(6)`

// MySQLCountArgs binds MySQLStatsBacklogScheduled (Counts 2),
// MySQLStatsDead (Counts 1), MySQLStats and MySQLOpsCounts (Counts 3): the cap, once
// per count.
type MySQLCountArgs struct {
	Cap    int
	Counts int
}

// Args returns the parameters in order.
func (a MySQLCountArgs) Args() []any {
	args := make([]any, max(a.Counts, 1))
	for i := range args {
		args[i] = a.Cap
	}
	return args
}

// MySQLLockWaits bounds the lock waits of the statements after it in the
// session, as TxTimeouts' lock_timeout does on PostgreSQL (MySQLLockWait,
// the claim's, bounds the first alone): row locks
// (innodb_lock_wait_timeout) and metadata locks (lock_wait_timeout, which
// a statement takes on each table it opens, and waits for while DDL holds
// it), both in whole seconds, at least 1; a wait that passes fails with
// error 1205 (ER_LOCK_WAIT_TIMEOUT). Neither has a per-transaction form
// both servers accept, so it stays the connection's setting: a relay sets
// it on each connection it takes, before the transaction. Binds
// MySQLLockWaitsArgs.
const MySQLLockWaits = `SET SESSION innodb_lock_wait_timeout = ?, lock_wait_timeout = ?`

// MySQLLockWaitsArgs binds MySQLLockWaits.
type MySQLLockWaitsArgs struct {
	Wait time.Duration
}

// Args returns the parameters in order.
func (a MySQLLockWaitsArgs) Args() []any {
	s := max(1, int64(a.Wait/time.Second))
	return []any{s, s}
}

// MySQLServer is which server speaks MySQL's protocol: their statement
// time limits differ.
type MySQLServer uint8

const (
	// ServerMySQL is MySQL 8.0 and later.
	ServerMySQL MySQLServer = iota
	// ServerMariaDB is MariaDB 10.6 and later.
	ServerMariaDB
)

// MySQLServerOf tells the servers apart by the version string that
// DialectProbe (SELECT VERSION()) reads: MariaDB's contains "MariaDB"
// ("10.11.6-MariaDB-1:10.11.6+maria~ubu2204-log").
func MySQLServerOf(version string) MySQLServer {
	if strings.Contains(version, "MariaDB") {
		return ServerMariaDB
	}
	return ServerMySQL
}

// MySQLMaxExecutionTime limits MySQL's read-only SELECTs in the session
// (milliseconds; 0: none); one that runs over fails with error 3024
// (ER_QUERY_TIMEOUT). MySQL limits nothing else: an UPDATE or DELETE runs
// until it ends, waiting for a lock no longer than MySQLLockWaits allows.
// Binds MySQLStatementTimeArgs.
const MySQLMaxExecutionTime = `SET SESSION max_execution_time = ?`

// MariaDBMaxStatementTime limits every statement of the session (seconds,
// to the microsecond; 0: none); one that runs over fails with error 1969
// (ER_STATEMENT_TIMEOUT). Binds MySQLStatementTimeArgs.
const MariaDBMaxStatementTime = `SET SESSION max_statement_time = ?`

// StatementTime is the server's statement that limits how long the
// session's statements run: MySQLMaxExecutionTime or
// MariaDBMaxStatementTime. It is a session setting on both.
func (s MySQLServer) StatementTime() string {
	if s == ServerMariaDB {
		return MariaDBMaxStatementTime
	}
	return MySQLMaxExecutionTime
}

// SessionLimits is MySQLLockWaits and StatementTime in one statement, so
// that the relay sets both before each transaction in one round trip. It
// binds MySQLLockWaitsArgs' parameters, then MySQLStatementTimeArgs'.
func (s MySQLServer) SessionLimits() string {
	return MySQLLockWaits + ", " + strings.TrimPrefix(s.StatementTime(), "SET SESSION ")
}

// MySQLStatementTimeArgs binds Server's StatementTime.
type MySQLStatementTimeArgs struct {
	Server MySQLServer
	Limit  time.Duration // 0: none; a positive limit is at least the server's unit
}

// Args returns the parameters in order.
func (a MySQLStatementTimeArgs) Args() []any {
	if a.Limit <= 0 {
		return []any{0}
	}
	if a.Server == ServerMariaDB {
		return []any{max(a.Limit, time.Microsecond).Seconds()}
	}
	return []any{max(1, a.Limit.Milliseconds())}
}

// MySQLLockProbe is the lockout's probe on MySQL, statements run in a READ
// COMMITTED transaction the relay rolls back, after MySQLLockWaits with
// the shortest wait both servers accept (one second; MySQL has no
// NOWAIT for metadata locks): each locking read of a row that cannot
// exist takes the table's metadata lock the relay's writes take (shared
// write) and no row lock, so it fails with error 1205 while another
// session holds the table (LOCK TABLES, an ALTER TABLE's exclusive
// phase). The claim floor is read without locking, taking the metadata
// lock its claim gate takes; MySQLLockProbeGate then tries the gate.
var MySQLLockProbe = [...]string{
	`SELECT id FROM {{table}} WHERE id = 0 FOR UPDATE`,
	`SELECT id FROM {{relays}} WHERE id = '' FOR UPDATE`,
	`SELECT shard FROM {{shards}} WHERE shard = -1 FOR UPDATE`,
	`SELECT one FROM {{floor}} WHERE one = 0`,
}

// MySQLLockProbeGate tries the claim gate as a claim takes it
// (MySQLClaimGate), after MySQLLockProbe: error 1205 here means an
// operator's retry or replay holds it.
const MySQLLockProbeGate = `SELECT floor FROM {{floor}} WHERE one = 1 LOCK IN SHARE MODE`

// MySQLPartitioned counts the partitions of a table in the connection's
// database (none: it is not partitioned). Binds the table's unquoted
// name.
const MySQLPartitioned = `SELECT COUNT(*) FROM information_schema.PARTITIONS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND PARTITION_NAME IS NOT NULL`

// MySQLFlushLogAtTrxCommit reads whether InnoDB makes each commit durable
// before it answers (1). With any other value a commit the relay saw may
// be lost in a crash, and a claim cannot make an earlier writer's commit
// durable as PostgreSQL's does: the relay refuses to run.
const MySQLFlushLogAtTrxCommit = `SELECT @@GLOBAL.innodb_flush_log_at_trx_commit`

// mysqlMemberStatements is the statements above, rendered at sizes the
// grammar test parses (MySQLStatements).
func mysqlMemberStatements(n Names) map[string]string {
	return map[string]string{
		"MySQLRegister":              n.Render(MySQLRegister),
		"MySQLPredecessors":          n.Render(MySQLPredecessors),
		"MySQLStaleRelays":           n.Render(MySQLStaleRelays),
		"MySQLDeleteRelays(2)":       MySQLDeleteRelays(n, 2),
		"MySQLOtherIncarnations(0)":  MySQLOtherIncarnations(n, 0),
		"MySQLOtherIncarnations(2)":  MySQLOtherIncarnations(n, 2),
		"MySQLHeartbeat":             n.Render(MySQLHeartbeat),
		"MySQLLiveRelays":            n.Render(MySQLLiveRelays),
		"MySQLReleaseShards(0)":      MySQLReleaseShards(n, 0),
		"MySQLReleaseShards(3)":      MySQLReleaseShards(n, 3),
		"MySQLAcquireShards(3)":      MySQLAcquireShards(n, 3),
		"MySQLOwnedShardList":        n.Render(MySQLOwnedShardList),
		"MySQLOwnedShards":           n.Render(MySQLOwnedShards),
		"MySQLLeaveShards":           n.Render(MySQLLeaveShards),
		"MySQLLeaveRelay":            n.Render(MySQLLeaveRelay),
		"MySQLShardsInHandover(0)":   MySQLShardsInHandover(n, 0),
		"MySQLShardsInHandover(3)":   MySQLShardsInHandover(n, 3),
		"MySQLPruneBatch":            n.Render(MySQLPruneBatch),
		"MySQLPrune(3)":              MySQLPrune(n, 3),
		"MySQLStatsLags":             n.Render(MySQLStatsLags),
		"MySQLStatsBacklogScheduled": n.Render(MySQLStatsBacklogScheduled),
		"MySQLStatsDead":             n.Render(MySQLStatsDead),
		"MySQLStats":                 n.Render(MySQLStats),
		"MySQLLockWaits":             MySQLLockWaits,
		"MySQLLockProbe[0]":          n.Render(MySQLLockProbe[0]),
		"MySQLLockProbe[1]":          n.Render(MySQLLockProbe[1]),
		"MySQLLockProbe[2]":          n.Render(MySQLLockProbe[2]),
		"MySQLLockProbe[3]":          n.Render(MySQLLockProbe[3]),
		"MySQLLockProbeGate":         n.Render(MySQLLockProbeGate),
		"MySQLPartitioned":           MySQLPartitioned,
		"MySQLFlushLogAtTrxCommit":   MySQLFlushLogAtTrxCommit,
		"MySQLMaxExecutionTime":      MySQLMaxExecutionTime,
		"MariaDBMaxStatementTime":    MariaDBMaxStatementTime,
		"SessionLimits(MySQL)":       ServerMySQL.SessionLimits(),
		"SessionLimits(MariaDB)":     ServerMariaDB.SessionLimits(),
	}
}
