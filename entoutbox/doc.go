// Package entoutbox records outbox events for ent entities in the
// transaction of the mutation that changes them: the entity row and its
// events commit together or not at all.
//
// What an application writes:
//
//	// entc.go: the one extra line is the extension.
//	entc.Generate("./schema", &gen.Config{}, entc.Extensions(entoutboxext.New()))
//
//	// schema/order.go
//	func (Order) Mixin() []ent.Mixin {
//		return []ent.Mixin{entoutbox.Mixin{Topic: "orders", ChangeEvents: true}}
//	}
//
//	// main.go: import _ "<module>/ent/runtime", then
//	err := entoutbox.WithTx(ctx, client, func(tx *ent.Tx) error {
//		_, err := tx.Order.Create().SetTotal(1250).Save(ctx) // order row + outbox row
//		return err
//	})
//
// # Events
//
// With ChangeEvents, every created, updated or deleted row yields one event
// "<type>.created", ".updated" or ".deleted" (type: Mixin.AggregateType,
// default the ent type name in snake case), keyed by the entity's ID, with a
// ChangePayload: the fields set, the increments added, and for UpdateOne the
// old values. Fields marked Sensitive() are left out. Mixin.Events builds
// further events from the mutation (see Change), for example domain events
// such as "order.paid" from a status change. Emit writes explicit events on
// an *ent.Tx. All events of one mutation are inserted in one statement, on
// the mutation's transaction, with the mutation's context.
//
// Update and Delete of many rows yield one event per affected row. The
// hook reads the matching IDs in the same transaction before the statement
// (ent's IDs) and restricts the statement to them, so a row that starts
// matching in between is left alone, as if the statement had run when the
// IDs were read. Under READ COMMITTED a concurrent transaction may still
// change or delete some of the read rows before the statement; it then
// changes fewer rows than were read, and the mutation fails with
// ErrConcurrentChange rather than write an event for a row it did not
// change: roll back and retry. Under REPEATABLE READ or SERIALIZABLE the
// same conflict is PostgreSQL's serialization failure. The old values of
// UpdateOne are likewise read just before the update, without a lock; a
// status field checked in the update's predicate (see examples/ent) keeps
// them exact.
//
// The restriction binds one parameter per ID, so one Update or Delete can
// change at most 65,535 rows (PostgreSQL's limit); split larger ones.
//
// CreateBulk runs the hook once per builder, so its events take one
// statement per row.
//
// # Failure
//
// A mutation of an entity with the Mixin that is not in a transaction is
// refused before any SQL runs, with an error matching ErrNoTransaction.
// entoutbox does not open a transaction for it: a hook cannot change the
// driver an ent builder uses, and re-running the mutation in a new
// transaction loses rows in CreateBulk and runs earlier hooks twice.
//
// An invalid event (txoutbox.ErrInvalidEvent: bad topic, payload over
// Writer.MaxPayloadBytes, ...), an error from Mixin.Events, or a failing
// outbox insert fails the mutation. The entity change has then already run
// in the transaction, so the transaction must be rolled back; WithTx does
// it, so no entity row commits without its events.
//
// The Mixin's hook is installed by the generated ent/runtime package. A
// program that does not import it gets "ent: uninitialized hook (forgotten
// import ent/runtime?)" from every mutation of the entity, instead of
// mutations that silently skip the outbox.
//
// Entities without the Mixin are untouched: their mutations run as before,
// in or outside transactions.
//
// # Why an entc extension
//
// The hooks must work with any generated schema without importing it. ent
// offers two routes. The sql/execquery feature flag gives every mutation
// ExecContext, but outside a transaction it runs on the pool, and the only
// "in a transaction?" check left is Tx(), which returns the application's
// own *ent.Tx type that a library cannot name, so it would need reflection
// or string-matching an error. The extension (package entoutboxext) instead
// generates one small file with EntoutboxDriver on the generated config
// (so on the client, *ent.Tx and every mutation), returning the driver and
// whether it is ent's transaction driver, and EntoutboxID, EntoutboxIDs and
// EntoutboxSensitive on every mutation. entoutbox finds them by interface
// assertion: a reliable transaction check, no reflection, and no feature
// flag that widens the application's API. Code generated without the
// extension fails mutations with ErrNotGenerated.
//
// The extension lives in its own package so that programs importing
// entoutbox at run time do not link ent's code generator. Entities need a
// single-field ID (not an edge schema's composite ID).
//
// The events go to PostgreSQL only: Execer, Emit and the hook refuse a
// driver of another dialect.
package entoutbox
