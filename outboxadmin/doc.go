// Package outboxadmin is the operator's API to an outbox: its status, its
// dead events and replays. The outbox CLI (outbox status, outbox dead,
// outbox replay) is a thin layer over it; use it to build the same tools
// into an admin page or a runbook job; package console (outbox ui) is a
// web console built on it.
//
//	adm, err := outboxadmin.New(db, outboxadmin.Config{})
//	st, err := adm.Status(ctx)                                    // backlog, lag, dead; relays and shards
//	dead, err := adm.ListDead(ctx, outboxadmin.Filter{Topic: "orders"}, 0, 50)
//	retried, err := adm.Retry(ctx, outboxadmin.Filter{IDs: []int64{dead[0].ID}}, false)
//
// # Dead events
//
// A dead event failed the relay's MaxAttempts publishes, the broker
// refusing it (the polling relay never makes an event dead for an outage),
// or could not be decoded. It does not hold
// back its aggregate: the later events flow. Retry returns it to pending with
// fresh attempts; it goes out before every later event of its aggregate that
// is still pending (see Retry for the ones already in flight). Drop deletes
// it. Both act on rows that are dead when they run, under row locks, so a
// concurrent relay never sees half an operation, and both take a Filter that
// must select something explicitly (ErrNoSelection). While relays run, the
// database may end a retry's or a replay's transaction as a deadlock's
// victim (their row locks meet a relay's settlement in another order); it
// was rolled back whole, and it runs again, up to three times in all.
//
// # Looking events up
//
// Event reads one row by its id with its payload; FindEvents finds the
// rows of an event id or an aggregate id on indexes only (see its
// Config.LookupWindow); Snapshot reads the totals and the highest row id
// cheaply enough to sample every few seconds, and PublishRate turns two
// snapshots into a publish rate.
//
// # Locks
//
// Locks lists the sessions that hold or wait for a lock on the outbox
// table or its companions that the relays' statements wait behind (a
// DBA's ALTER TABLE, a VACUUM FULL, a migration): while one lasts past the
// relays' relay.Config.LockTimeout, they publish nothing from the table.
// A reading of the table that gives up on such a lock (under a
// lock_timeout of the caller's) fails with an error IsLockTimeout
// recognises; outbox status then shows Locks.
//
// # Replay
//
// Replay returns published events still in the outbox (within the relays'
// Retention) to pending, so the relays publish them again with their
// original event ids, in order per aggregate. Consumers that deduplicate on
// the event id (package inbox) skip what they already have.
//
// # MySQL and MariaDB
//
// New detects the database (txoutbox.DetectDialect). On MySQL 8.0+ and
// MariaDB 10.6+ every method runs, with the same guarantees, but for what
// the database cannot tell: TopicStats, TopicSnapshot and Locks return an
// error matching errors.ErrUnsupported (Status reads the totals alone),
// there is no WAL relay (no Slot, no ErrWALStreamed) and no NOTIFY (the
// relays find retried and replayed events at their next poll). See
// docs/mysql.md.
package outboxadmin
