// Package entoutboxext is the entc extension that entoutbox's mixin needs:
// one line in the application's entc.go.
//
//	err := entc.Generate("./schema", &gen.Config{},
//		entc.Extensions(entoutboxext.New()),
//	)
//
// It adds one file, entoutbox.go, to the generated ent package, with a few
// methods entoutbox detects by interface assertion:
//
//   - EntoutboxDriver on the generated config, so on the client, *ent.Tx
//     and every mutation: the driver, and whether it is a transaction;
//   - EntoutboxQueryContext on the same: a query on the client's or the
//     transaction's connection, which package outboxtest reads through;
//   - EntoutboxID, EntoutboxIDs and EntoutboxSensitive on every mutation of
//     an entity with a single-field ID.
//
// It is a package of its own so that applications, which import entoutbox at
// run time, do not link ent's code generator.
package entoutboxext
