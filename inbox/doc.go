// Package inbox gives consumers effectively-once processing of the events
// the outbox delivers at least once. Each consumer records the ids of the
// events it has processed in an inbox table, in the same transaction as the
// business change the event causes; a redelivered event finds its id there
// and is skipped, and a failed handler rolls its record back with its
// writes, so the event is processed again when redelivered.
//
// Create the table with the migrations.Inbox set (the outbox CLI or
// migrations.New(db, migrations.Config{Set: migrations.Inbox})), then:
//
//	ib, err := inbox.New(inbox.Config{})                  // table "inbox"
//	mw, err := ib.Middleware(inbox.MiddlewareConfig{Consumer: "billing", DB: db})
//	router.AddMiddleware(mw)                               // Watermill router
//
// and in the handler, make every change on the message's transaction:
//
//	tx, _ := inbox.TxFromContext(msg.Context())
//
// Without Watermill, or on your own transaction:
//
//	processed, err := ib.Run(ctx, db, "billing", eventID, func(tx *sql.Tx) error { ... })
//	processed, err := ib.Process(ctx, tx, "billing", eventID, func() error { ... })
//
// Process takes a *sql.Tx, gormoutbox.Execer(tx) for a *gorm.DB inside a transaction,
// Pgx(tx) for a pgx.Tx, or ent's generated *ent.Tx. ent exposes raw SQL on
// its transaction only with the sql/execquery feature (the option
// entc.FeatureNames("sql/execquery"), or --feature sql/execquery), which is
// how this package reaches it without importing your generated code. ent's
// *ent.Client has ExecContext too, on the pool: pass the Tx, never the
// Client.
//
// # Event ids
//
// The txoutbox relay publishes each event with its id in the message
// metadata "event_id" (a Kafka header), and as the Watermill message UUID.
// The middleware reads the metadata (MiddlewareConfig.EventIDKey) and uses
// the UUID only when told to (MiddlewareConfig.FallbackToUUID), because
// other publishers give every publish attempt a fresh UUID. Ids are UUIDs,
// stored as such, so differently spelled copies of one id match.
//
// A message without a usable id is nacked with ErrNoEventID or
// ErrInvalidEventID by default; MiddlewareConfig.OnInvalidID can drop it or
// handle it without the inbox instead.
//
// # Large payloads
//
// Events the relay published through a claim check (package claimcheck,
// docs/large-payloads.md) arrive as references; put claimcheck's
// middleware before this one, so the payload is fetched before the
// inbox's transaction opens and a missing object fails the message
// before anything is recorded:
//
//	router.AddMiddleware(claimcheck.Middleware(store), mw)
//
// # Concurrency
//
// The record is an INSERT ... ON CONFLICT DO NOTHING keyed by (consumer,
// event id). Two transactions delivering the same event at once serialize on
// that key: the second waits for the first, then skips if it committed or
// proceeds if it rolled back. Consumers with different names process the
// same event independently.
//
// # Retention
//
// Prune deletes records older than a window, in batches. The window must
// outlast every redelivery of an event: the broker's retention plus the
// outbox's retention of published rows plus the relay's retry horizon, at
// least. An id pruned earlier than that is processed again if its event
// comes back. See Prune.
package inbox
