// Package relay publishes the outbox: it claims committed events from the
// outbox table and publishes them through any Watermill publisher (Kafka via
// NewKafkaPublisher), at least once, in order per aggregate, with any number
// of relays running at once.
//
//	pub, err := relay.NewKafkaPublisher(brokers, relay.KafkaConfig{})
//	r, err := relay.New(db, pub, relay.Config{})
//	err = r.Run(ctx) // until ctx ends
//
// # The cycle
//
// A claim is one short statement: it takes a batch of due rows with FOR
// UPDATE SKIP LOCKED, marks them claimed under a lease (owner, expiry) and
// commits. Publishing happens outside any transaction: lanes publish the
// rows concurrently and wait for the broker's acknowledgement of each.
// Acknowledged rows are marked published by one statement per flush, not
// one per row. A failed row goes back to pending with attempts+1, an
// exponentially backed-off next attempt with jitter, and its error; after
// MaxAttempts it is dead. The next batch is claimed while the current one
// publishes, and the marks are written while the next publishes, so the
// database and the broker work at the same time.
//
// # Ordering
//
// Kafka keeps order per partition, and the aggregate id is the message key,
// so order per aggregate is what matters. Four mechanisms keep it:
//
//   - Shards. The schema hashes each aggregate id into one of 256 shards.
//     Each live relay heartbeats, and shards are assigned to live relays by
//     rendezvous hashing; a relay claims only rows of shards it owns, so one
//     aggregate is published by one relay at a time. Relays joining or
//     leaving move only the shards they gain or lose, and announce it with a
//     NOTIFY so peers rebalance at once. A relay whose heartbeat is older
//     than StaleAfter is declared dead and its shards and claims are taken
//     over; its claims also expire after LeaseDuration.
//   - Handover. A relay claims from a shard it has just acquired only once
//     the shard's previous owner, if still alive, has no rows of it in
//     flight, so those are published before anything later of their
//     aggregates.
//   - Lanes. Within a relay, an aggregate always maps to the same lane, which
//     publishes its rows one at a time in id order and waits for each ack.
//   - Fences. A row that fails holds back the later rows of its aggregate
//     (and only those): in the lane at once, and in the claim query once the
//     failure is recorded, until the failed row is retried. A dead row does
//     not fence: its aggregate's later events flow, and
//     the dead one waits for an operator (the fence policy). Retrying it
//     publishes it before any later event of its aggregate still pending.
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
// event_id header: deduplicate on it (package inbox). A relay that crashes
// after the broker acknowledged a row and before the row was marked
// publishes it again after takeover; at most MaxInFlight rows per crash.
//
// # Latency and polling
//
// Writers send NOTIFY in the insert statement, at most one per
// txoutbox.WriterConfig.NotifyInterval (50ms); the relay LISTENs on one
// pooled connection when the database/sql driver is pgx, and after every
// wake-up polls every 10ms for 100ms, so the writes a debounced writer did not
// announce are found as fast. It also polls every PollInterval as a fallback
// and for retries that come due. Set DisableListen for PgBouncer in
// transaction mode.
//
// # Bookkeeping
//
// The relay's own statements (claims, marks, failures, releases) commit with
// synchronous_commit off: losing one in a database crash only republishes or
// retries an event, never loses one, and not waiting for the WAL flush keeps
// claims and marks short. Applications' transactions are not affected.
//
// # Failures
//
// Losing the database or the broker makes the relay log, back off and retry;
// it never exits on them and resumes by itself. A payload the broker rejects
// (too large, unknown topic) is retried with backoff, then dead; it never
// blocks other aggregates. Two effects of the Kafka producer show there: an
// event sent in the same produce request as a refused one may fail that
// attempt too (it is retried and arrives), and after three failed lookups of
// an unknown topic Sarama's circuit breaker answers "circuit breaker is
// open" for a while, which then becomes the dead event's last error.
//
// # Retention and health
//
// Published rows older than Retention are deleted in batches by one relay at
// a time (an advisory lock). Dead rows stay until handled. ReadStats returns
// backlog, lag (age of the oldest unpublished event) and dead count for
// health checks; the same figures are OpenTelemetry gauges, with counters
// of published, retried and dead-lettered events, a publish latency
// histogram, claim batch sizes and owned shards.
package relay
