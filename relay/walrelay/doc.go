// Package walrelay is the outbox's second relay mode: it streams the
// outbox table's inserts from PostgreSQL's write-ahead log through a
// logical replication slot (pgoutput, over pgx) and publishes them through
// the same Watermill publisher, as the same messages, as package relay:
// the two modes share one publish core, so a message, its CloudEvents
// headers, its producer span and the publish-duration metric are the
// polling relay's, the span and metrics under this package's
// instrumentation scope.
//
//	r, err := walrelay.New(url, pub, walrelay.Config{})
//	if err != nil { ... }
//	err = r.Run(ctx) // until ctx ends
//
// Compared with the polling relay it writes nothing per event: no claim, no
// mark. Events go out in commit order, so one aggregate's events keep their
// order even when writers do not lock the aggregate's row. Lanes by
// aggregate keep publishing concurrent.
//
// # Acknowledgement and duplicates
//
// The slot's confirmed position moves only past transactions whose every
// event the broker acknowledged (or that went dead), in commit order, and a
// keepalive never moves it while anything is in flight. After a crash of
// the relay the next one resumes from the confirmed position: it publishes
// again at most MaxInFlight events, plus the rest of the largest
// transaction in flight, the events settled in the last FlushInterval and
// those past the slot's ceiling (below). A transaction's events go to the
// lanes as they arrive, held to MaxInFlight; the slot is confirmed at its
// commit.
// After a crash of PostgreSQL the slot resumes from the position last
// written to disk (at a checkpoint, or when the slot's restart point
// moves); the relay skips the rows the table holds as published or dead,
// so with a Retention the bound grows only by the cleanup's lag, while
// with Retention 0 (rows deleted) and for table-less events everything
// confirmed since that position goes out again.
//
// # What the relay deletes by
//
// The cleanup takes what the slot confirmed for published. That holds
// only for a slot this relay's streaming moved, through a publication that
// carried every insert of the table all along, so the relay checks the
// publication at start and before every cleanup round (ErrPublication,
// with the fix) and keeps a marker in the publication's comment: the slot
// it made, a ceiling it never confirms the slot past (raised while its
// walsender holds the slot, so a slot made again starts above it), a
// fingerprint of the publication and the highest row the slot's stream
// may bring that the table holds as published (so a restart reads it
// instead of walking the backlog). On a slot without its marker, or after
// the publication changed, it publishes the table's unpublished rows
// before it streams, instead of deleting them. It makes or takes over no
// slot while polling relays heartbeat on the table (ErrPollingRelays),
// and a polling relay does not claim while its slot streams
// (relay.ErrWALStreams).
//
// The relay publishes every event at commit, so it cannot honour
// txoutbox.Event.NotBefore: it sets no slot up while events scheduled for
// later wait in the table (ErrScheduled; one committed while it made the
// slot is found in the slot's snapshot, and it drops the slot again), and
// once its slot streams the table the database refuses such events at
// write time (schema version 7's trigger; txoutbox.ErrNotBeforeStreamed),
// as a WALMessages writer does: those more than txoutbox.MaxNotBeforeSkew
// ahead of the statement's clock. A NotBefore already past, or within that
// slack (clock skew between the writer's host and the database's), is
// published at commit, in its aggregate's order.
// Delayed events need the polling relay. A relay that refuses to set its
// slot up, for either reason, drops the publication it created.
//
// # Cleanup and takeover
//
// Rows stay in the table until the slot has confirmed them; then a
// batched cleanup deletes them (or marks them published, with Retention),
// never a statement per event (see Config.Retention). What the slot has
// not confirmed is still in the table, so the polling relay can take over:
// Takeover drops the slot after marking published exactly the rows the
// slot confirmed (`outbox wal takeover`).
//
// # Names
//
// A slot belongs to one database, but its name is the server's. The
// default names of the slot and the publication (SlotDefault) are made of
// the database, the schema and the table, so two databases' relays of
// tables named alike never meet on one slot; Run resolves them when it
// connects (Relay.Slot), keeping a slot of an earlier version's default
// name that exists in its own database (see Config.Slot). Neither Run nor
// Takeover streams, drops or takes over a slot of another database
// (ErrSlotOtherDatabase).
//
// # Availability
//
// A slot streams to one connection at a time: a second relay's
// START_REPLICATION fails with "replication slot is active", and it waits
// as a standby, trying again every StandbyRetry. A relay that dies closes
// its connection and a standby takes over within StandbyRetry; one cut off
// from the server gives the slot up after SenderTimeout/2, and the server
// frees it after SenderTimeout. A relay that stops ends its publishes
// before it lets the slot go.
//
// # Table-less events
//
// txoutbox.WriterConfig.WALMessages makes the writer record events with
// pg_logical_emit_message instead of a row; this relay publishes them
// among the rows, in commit order. They exist only in the WAL: if the slot
// is lost or dropped before it confirmed them, nothing is left to publish.
// The writer refuses them (txoutbox.ErrNoWALSlot) unless wal_level is
// logical and a WAL relay's slot streams the table.
package walrelay
