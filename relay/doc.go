// Package relay publishes the outbox: it claims committed events from the
// outbox table and publishes them through any Watermill publisher (Kafka via
// package kafkapub), at least once, in order per aggregate, with any number
// of relays running at once.
//
//	pub, err := kafkapub.NewPublisher(brokers, kafkapub.Config{})
//	r, err := relay.New(db, pub, relay.Config{})
//	err = r.Run(ctx) // until ctx ends
//
// # The cycle
//
// A claim is one short statement: it takes a batch of due rows with FOR
// UPDATE SKIP LOCKED, marks them claimed under a lease (owner, expiry) and
// commits. A batch is bounded in rows (BatchSize) and in payload bytes
// (BatchBytes), and so are the claimed rows held in memory (MaxInFlight,
// MaxInFlightBytes), so large events cannot make a relay run out of
// memory; a row larger than the budget is claimed alone. Publishing happens outside any transaction: lanes publish the
// rows concurrently and wait for the broker's acknowledgement of each. With
// a BatchPublisher (kafkapub's), a lane sends the rows queued in it in one
// call, up to Config.LaneBatch and never two of one aggregate at once, so
// a broker request carries many events.
// Acknowledged rows are marked published by one statement per flush and
// claim, not one per row. A failed row goes back to pending with attempts+1, an
// exponentially backed-off next attempt with jitter, and its error; after
// MaxAttempts it is dead, if the broker refused it (see Failures). The next
// batch is claimed while the current one publishes, and the marks are written while the next publishes, so the
// database and the broker work at the same time.
//
// # Ordering
//
// Kafka keeps order per partition, and the aggregate id is the message key,
// so order per aggregate is what matters. The guarantee: an event is first
// published only after every earlier event of its aggregate (in outbox id
// order) that is not dead has been acknowledged by the broker. Its
// preconditions: events of one aggregate commit in id order (see the limit
// below), and the publisher returns from Publish only after the broker
// acknowledged the message. It holds with any number of relays, under
// restarts with the same or fresh ids, pauses, partitions, broker stalls,
// database crashes and operators at work; what they cost is duplicates,
// never order. A dead event is outside it by definition: its aggregate's
// later events flow past it, and once an operator retries it, it goes
// before every later event of its aggregate not yet claimed (the ones
// already in flight are reported by outboxadmin.Retry as Overtaken).
// Retries and replays take a claim gate, so no claim runs on a snapshot
// from before one that commits meanwhile.
//
// One rule, checked by the claim statement in the database, carries it: a
// relay claims a row only if every earlier unpublished row of its aggregate
// is claimed by the same relay incarnation or taken by the same claim. A
// row another relay holds, a row in retry backoff, a row an operator or a
// frozen session has locked (which SKIP LOCKED passes over), all hold back
// the later rows of their aggregate. What the rule trusts, each part of the
// relay makes true:
//
//   - Incarnations. Each Run registers as "<ID>#<random>" and claims under
//     that name, so a relay restarted under a fixed ID (a StatefulSet pod)
//     never mistakes its predecessor's rows for its own; the new incarnation
//     replaces the old one in the relays table at once, and the old one's
//     rows are claimed again, in order. A relay that drops rows from memory
//     without recording them (it was declared dead, or could not heartbeat
//     for StaleAfter less one HeartbeatInterval) ends its incarnation:
//     it publishes nothing more of what it held, and registers anew.
//   - Lanes. Within a relay, an aggregate always maps to the same lane, which
//     publishes its rows one at a time in id order and waits for each ack.
//   - Fences. A row that fails holds back the later rows of its aggregate
//     (and only those): in the lane at once, which returns them to pending,
//     and in the claim once the failure is recorded, until the failed row is
//     retried. A dead row does not hold back: its aggregate's later events
//     flow, and the dead one waits for an operator (the fence policy).
//     Retrying it publishes it before any later event of its aggregate still
//     pending.
//   - Durable records. A failure or release takes a row out of memory, so it
//     commits durably before the lane lets later rows go. Marks commit
//     asynchronously: losing one in a database crash leaves its rows
//     claimed by their holder, which the rule handles.
//
// A publish that outlives its lease (a stalled broker), a paused relay that
// wakes up and finishes a publish, a takeover while the old owner's message
// still sits in the broker's queue: each may deliver an event twice, never
// before an earlier one, since whoever publishes the later event has the
// earlier one acknowledged first.
//
// Shards spread the work and keep claims from contending: the schema hashes
// each aggregate id into one of 256 shards, assigned to live relays by
// rendezvous hashing of their IDs. A relay restarted under the same ID gets
// the same shards back. Relays joining or leaving move only the shards they
// gain or lose, and announce it with a NOTIFY so peers rebalance at once. A
// relay claims from a newly acquired shard once its previous owner has no
// rows of it in flight. Order does not rest on shards: the rule holds while
// two relays' shard lists overlap. (While they do, briefly, a relay's claim
// can find its first candidates held back behind a peer's rows and return
// fewer rows until the peer's publishes are done.)
//
// Remaining limit: two transactions that write events for the same aggregate
// concurrently, without locking the aggregate's row, commit in an order the
// outbox cannot know; their events are published in id (insert) order. Lock
// the aggregate row (SELECT ... FOR UPDATE, or update it) in transactions
// that emit its events, which ORM saves of that row do anyway.
//
// # Delivery
//
// At least once, with the event id as the Watermill message UUID and the
// event_id header: deduplicate on it (package inbox). Duplicates come from
// a relay that dies or is cut off between the broker's ack and the mark (at
// most MaxInFlight rows each time), and from publishes that outlive
// LeaseDuration (the row is claimed and published again).
//
// # Timeouts
//
// Every statement runs under StatementTimeout, and the relay's transactions
// set it as their statement, lock and idle-in-transaction timeouts, so a
// relay frozen or cut off inside a claim loses its session and its row
// locks on the server side instead of holding them until TCP keepalive
// notices. Claims do not lock the relays table, and declaring relays dead
// skips rows another transaction holds, so one frozen relay cannot stop
// its peers' heartbeats.
//
// A lock another session holds on the table or its companions (a DBA's
// ALTER TABLE, a VACUUM FULL, a migration) is waited for LockTimeout at
// most (the statements' own parse included): then the table is locked
// out, the relay runs nothing on it but a probe that waits for no lock,
// and it resumes when the probe passes; it is logged, counted
// (txoutbox.relay.lock_timeouts, txoutbox.relay.locked.duration) and
// reported in Health.Locked meanwhile. In a Group the other tables go on
// (see Config.LockTimeout).
//
// # Delivery not before a time
//
// An event written with txoutbox.Event.NotBefore in the future is
// published no earlier than that time by the database clock; one already
// past when the insert runs (by its statement's clock, however long its
// transaction has been open) is an ordinary event, due at once. The writer
// stores the time in the row's retry_at (schema version 7), so the claim
// reads the row as it reads a retry in backoff: not at all until it is due,
// then on the retries' index in retry_at order. It is a first attempt all
// the same (attempts 0): nothing counts it as a retry or a failure; once
// due, a failed publish of it backs off, is retried and may make it dead
// like any other event's.
//
// Precision: a scheduled event's time sends no NOTIFY, so it is found by
// the next poll, as a retry that comes due is: within PollInterval (1s by
// default) and a claim after its time, later only while the relay is busy
// with a backlog it claims ahead of it in id order or its shards change
// hands. The relay does not sleep until the next due time instead: an idle
// relay already polls every PollInterval, and knowing the next time would
// cost each poll a statement more; lower PollInterval for tighter timing.
//
// Order: the events of an aggregate are published in the order they were
// written, scheduled or not, so a delayed event holds back its aggregate's
// later events until it is published, including a delayed event written
// after it with an earlier time. This keeps the one ordering rule above
// (a scheduled row is a row not due) and what consumers of the aggregate's
// partition rely on. An event that must not wait, or must not hold others
// back (a reminder about an order that keeps changing), takes an aggregate
// id of its own: the aggregate id is only the message key. No option
// offers the other order: a scheduled event that let later events pass
// would reach the partition after events written after it, which is what
// the guarantee forbids, and the claim would need a second ordering rule.
// The later rows held back behind a scheduled row are walked by each claim
// (one index probe each), like those behind a row in backoff: many of them
// cost claims, where scheduled events alone cost nothing (see Cost).
//
// The WAL relay (package walrelay) publishes at commit and cannot delay an
// event: the database refuses a row scheduled more than
// txoutbox.MaxNotBeforeSkew ahead on a table its slot streams
// (txoutbox.ErrNotBeforeStreamed), and it does not set its slot up while
// scheduled rows wait. A NotBefore already past publishes at commit.
//
// # Latency and polling
//
// Writers send NOTIFY in the insert statement, at most one per
// txoutbox.WriterConfig.NotifyInterval (50ms); the relay LISTENs on one
// pooled connection when the database/sql driver is pgx, and after every
// wake-up polls again ClaimCooldown (25ms) after the claim (as often while
// its polls find rows) and, once a poll found nothing, once more 100ms
// after the last claim that found rows, so the writes a debounced writer
// did not announce are found within tens of milliseconds. It also polls
// PollInterval after its last claim as a fallback and for retries and
// scheduled events that come due. Set DisableListen for PgBouncer in
// transaction mode.
//
// After a claim that came back short, the next one (at a NOTIFY too)
// waits until ClaimCooldown after it began: under a steady stream of
// commits each claim and mark then carries a cooldown's rows, where a
// claim at every NOTIFY carried a few, at nearly the same cost to the
// database per statement. It adds at most the cooldown to the time from
// commit to publish; a full claim is followed at once.
//
// A claim is a short transaction of BEGIN, its settings, the claim
// statement and COMMIT. With the pgx driver the first three are sent
// together: two round trips a claim, four with another driver.
//
// # Bookkeeping
//
// Marks commit with synchronous_commit off, which keeps them short;
// failures and releases commit durably (see Durable records above), and so
// do claims that take rows: nothing is published before its row's commit
// is durable, even when the application commits with synchronous_commit =
// off (the claim's flush covers the writers' commits before it). A claim
// costs one WAL flush for its whole batch; an empty one none.
// Applications' transactions are not affected.
//
// # Failures
//
// Losing the database or the broker makes the relay log, back off and retry;
// it never exits on them and resumes by itself.
//
// Run refuses a table a WAL relay's slot streams (ErrWALStreams; package
// walrelay): the two modes would both publish every event. A relay that
// finds such a slot while it runs claims nothing, logging the error each
// heartbeat, until the slot is gone (walrelay.Takeover drops it).
//
// The rule: an outage is not a poison. An event goes dead for its own fault
// only, when the broker refuses that message: the publisher marks such
// errors with Permanent (kafkapub does for a message too large, a topic
// that is invalid, unknown or not authorised, a record the topic refuses),
// and an event is dead once it has failed MaxAttempts times, the last of
// them such a refusal. Every other failure is taken for an outage (the
// broker, the network or the publisher away: connection errors, timeouts,
// leader elections, not enough replicas). It counts as an attempt and
// fences its aggregate like any failure, but backs off no longer than
// OutageBackoffMax and never makes an event dead, so no event goes dead in
// an outage of any length. While publishes keep failing that way the relay
// logs that it is in an outage, shows it in the
// txoutbox.relay.outage.duration gauge, and backs off between claims. A
// publisher that marks nothing never dead-letters: its refused events are
// retried forever, holding back their aggregates only.
//
// A publish call that has not returned after PublishTimeout (a hung
// socket, an AMQP connection blocked by a broker alarm) counts as failed
// with an unknown outcome (ErrPublishTimeout): its events are retried, as
// after an outage, their aggregates fenced meanwhile; the broker may have
// them, so they may arrive twice. Its lane makes no other call until it
// returns. While such a call is outstanding and nothing was acknowledged
// since, the relay cannot make progress: Health.Stalled says so, and the
// relay ends its incarnation and leaves, so its peers take its shards and
// rows over at once; it joins again once the call returns.
//
// A refused event never blocks other aggregates. A row the relay cannot
// turn into a message (its headers are not a JSON object of strings, as
// when written by other tooling) goes dead at once with the reason. An
// event sent in the same produce request as a refused one may fail that
// attempt too (it is retried and arrives); after three failed lookups of
// an unknown topic Sarama's circuit breaker answers "circuit breaker is
// open" for a while, an outage error that does not count towards dead.
//
// Nor does a row no relay wrote. A row in backoff by next_attempt_at alone,
// with no retry_at (a dump older than schema version 5 restored into
// today's schema, an insert by hand, a relay of version 3 or 4 failing a
// publish), is read by the claim and cannot be taken, and a batch of them
// held back every other aggregate. The relay repairs the ones its claims
// would read, at start and every ten heartbeats after the claim floor's
// round: their retry_at becomes their next_attempt_at, so each still
// waits until then and holds back its own aggregate's later events only. It
// names them in one warning per episode, with the table and the first ids,
// counts them in txoutbox.relay.repaired, and names apart, as an error, the
// rows never due, which hold back their aggregate until an operator acts.
//
// # Large payloads
//
// An event too large for the broker goes dead as the broker's refusal,
// unless a claim check is on (Config.LargePayloads, a LargePayloads such
// as package claimcheck's store): the relay then uploads the payload of
// an event whose record would pass the threshold, and publishes a small
// reference instead. A failed upload is an outage, never the event's
// fault. docs/large-payloads.md describes it.
//
// # Cost
//
// No statement costs more than its batch or an index look-up, whatever the
// table holds: a claim reads its batch of first attempts and of retries
// that are due, on indexes that leave out the rows in retry backoff
// (schema version 5), so any number of aggregates in backoff costs a claim
// nothing; it walks the first attempts from the claim floor (schema
// version 8), an id below which no row can be one again, which the relays
// raise as the backlog drains, so the index entries of the rows published
// since the last VACUUM cost it nothing either; pruning reads the published rows it deletes on an index of
// their own, not the dead rows ahead of them; the handover check reads a
// batch of each new shard's backlog. Events scheduled for later are read
// by neither, whatever their number (see Delivery not before a time). The
// aggregates' later rows behind a row in backoff, or behind a scheduled
// row, are still walked past, one index probe each. The backlog
// and dead counts of txoutbox.ReadStats and the gauges are counts, which cost the
// backlog: they are spaced out when slow (see Config.StatsInterval). The
// tests in internal/outboxsql prove the bound on the work each plan does
// at two sizes ten times apart, under the custom and the generic plan.
//
// # MySQL and MariaDB
//
// New on a *sql.DB of github.com/go-sql-driver/mysql (or a driver that
// txoutbox.DetectDialect finds MySQL behind) runs the same relay on MySQL
// 8.0+ and MariaDB 10.6+, with the same guarantee, its claim made of
// several statements in one READ COMMITTED transaction
// (internal/outboxsql/claim_mysql.md). What differs, and why, is in
// docs/mysql.md:
//   - it polls: there is no LISTEN/NOTIFY (DisableListen is implied), so an
//     event on a quiet outbox waits up to PollInterval, whose default there
//     is PollIntervalMySQLDefault (50ms); a poll that finds nothing due
//     costs one indexed statement outside any transaction, not a claim;
//   - LockTimeout is rounded down to whole seconds, at least one
//     (innodb_lock_wait_timeout and lock_wait_timeout), and StatementTimeout
//     bounds MySQL's SELECTs only (max_execution_time), MariaDB's every
//     statement (max_statement_time);
//   - Run refuses, with an error matching ErrInvalidConfig, a server whose
//     innodb_flush_log_at_trx_commit is not 1: with 0 or 2 a crash may roll
//     back a commit whose event was published, and no claim can make it
//     durable; with 1, the claim's own durable commit comes after the
//     writers' commits of the rows it took, as on PostgreSQL;
//   - refused with ErrInvalidConfig: Table.Schema (a schema is a database
//     in MySQL), a partitioned outbox (at Run), NewGroup and FindTables;
//   - CheckGrants reads the privileges from information_schema, which
//     shows an account no role's grants: with a role enabled in the
//     session it refuses nothing.
//
// relaytest.Drain runs this relay on MySQL as on PostgreSQL, and
// txoutbox.ReadStats reads a MySQL outbox's figures (its counts stop at
// txoutbox.StatsExactMax instead of being estimated beyond).
//
// # Many outboxes: a schema per tenant
//
// A Group serves the outbox tables of many schemas of one database (a
// schema per tenant), a list (GroupConfig.Schemas) or every schema whose
// name matches a pattern (GroupConfig.SchemaPattern, "tenant_*"), whatever
// the name (any PostgreSQL allows), found again every DiscoverInterval: a new tenant's table, once migrated, is
// served without a restart, a dropped one's relay is stopped. Each table
// gets a Relay of its own from GroupConfig.Relay, with every guarantee
// above (its shards, membership, leases, fences, ordering, claim gate and
// floor): they share the pool, the publisher, one LISTEN connection and
// a few connections for their claims (GroupConfig.ClaimConns), and
// nothing that would let a table with a large backlog hold the others
// back (each claims and publishes on its own, within its own MaxInFlight
// and Lanes). A group's connections are all the pool's: one held for
// LISTEN, ClaimConns kept for the claims of every table, and up to seven
// more per table at once (eight while claims waiting on locks hold the
// claim connections, LockTimeout at most); bound them with
// db.SetMaxOpenConns, at least MinOpenConns (see Group). A table another
// session holds locked holds those connections for LockTimeout once, not
// for as long as the lock lasts (see Config.LockTimeout). Writers whose
// table has no schema (their search_path picks it) wake every table's
// relay; those whose table names the schema wake only its relay.
//
// # Retention and health
//
// Published rows older than Retention are deleted in batches by one relay at
// a time (an advisory lock). Dead rows stay until handled. Relay.Stats (and
// txoutbox.ReadStats, without a relay) returns
// backlog, lag (how long the oldest due unpublished event has waited), due
// lag (the same, leaving out the events held behind a scheduled event of
// their aggregate: the one to alert on), dead count and the events
// scheduled for later, which are neither backlog nor lag, for health
// checks; the same figures are OpenTelemetry gauges (txoutbox.outbox.lag,
// txoutbox.outbox.due_lag, txoutbox.outbox.scheduled, ...), with counters
// of published, retried and dead-lettered events, a publish latency
// histogram, claim batch sizes, owned shards, the outage gauge and the
// lockout's counter and gauge. Every
// measurement and publish span carries the table (TableAttribute,
// "txoutbox.table": "schema.name"), one value per table served, so relays
// of several tables, or a Group, share one MeterProvider and their figures
// stay apart. Its cardinality is the number of tables: a gauge has a series
// per table, a publish metric one per table × topic (× error type, on
// failure). The OpenTelemetry SDK keeps 2000 series per instrument by
// default and folds the rest into one overflow series: for a Group of many
// tables, size the MeterProvider's limit (sdkmetric.WithCardinalityLimit;
// `outbox relay` sets 100,000).
package relay
