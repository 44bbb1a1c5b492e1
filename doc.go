// Package txoutbox is a transactional outbox for Go services on PostgreSQL:
// domain events are written into an outbox table in the same database
// transaction as the business change, and a relay publishes them to Kafka
// (or any Watermill publisher) afterwards, at least once, in order per
// aggregate.
//
// This root package holds what every part shares: the Event, its
// validation, the Table naming an outbox, and the Writer that inserts events
// on a caller's transaction. Most applications do not use the Writer
// directly but one of the integrations:
//
//   - gormoutbox: a GORM plugin; models record events and the plugin writes
//     them in the model's own transaction.
//   - entoutbox: an ent mixin whose hooks write events in the mutation's
//     transaction.
//   - relay: the worker that publishes the outbox.
//   - inbox: consumer-side deduplication on the event id.
//   - migrations: the embedded, versioned schema and its migrator.
//
// Writing events with database/sql:
//
//	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{})
//	tx, err := db.BeginTx(ctx, nil)
//	// ... business writes on tx ...
//	ev, err := txoutbox.NewEvent("orders", "order", "42", "order.placed", placed)
//	err = w.Write(ctx, tx, ev)
//	err = tx.Commit()
//
// Nothing is published from the application: the outbox row commits or
// rolls back with the business row, and the relay takes it from there.
package txoutbox
