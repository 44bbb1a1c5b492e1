// Package publish is the publish core the two relay modes share: the
// polling relay (package relay) and the WAL relay (package walrelay,
// a module of its own under relay/, which Go's internal rule lets import
// this package: the rule goes by import path, not by module).
//
// It builds the message of an event (the Watermill message relay.Message
// documents, with the CloudEvents headers when configured), publishes a
// lane's events (one PublishBatch call or one Publish per event), each in
// a producer span and recorded in the publish-duration histogram and the
// sent-messages counter, and holds the retry backoff and the lane hash
// both modes use. What differs between the modes (claiming and marking
// rows, reading a slot, deciding what a failure means) stays with them.
//
// The instruments and spans carry the same names and attributes in both
// modes; the instrumentation scope (Config.Scope, each mode's import path)
// tells them apart.
//
// walrelay may be built against a newer relay module than its go.mod
// names (minimal version selection picks the highest required), so this
// package's API is a contract between the two modules: change it only in
// ways the walrelay versions already released still compile against.
package publish
