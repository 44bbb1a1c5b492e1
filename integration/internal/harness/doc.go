// Package harness runs txoutbox end to end under faults: a kfake broker in
// its own OS process, relays as `outbox relay` processes that can be
// SIGKILLed, writers on the GORM plugin and the ent mixin in the calling
// process, and a verifier that reads the broker back with franz-go's kgo
// (independent of the Sarama/Watermill publishing stack) and compares what
// it holds with what the database committed, by event id.
//
// The integration tests and the standalone runner (integration/chaos) share
// it: each scenario is a function that builds its world, injects its fault
// and returns a Result, whose Line is the suite's contract:
//
//	chaos: committed=N rolled_back=M delivered_unique=N lost=0 phantom=0 order_violations=0 duplicates=D dead=P crashes=K same_id_restarts=S pauses=Z partitions=X admin_ops=A db_crashes=C broker=kfake
package harness
