package walrelay

import "github.com/txoutbox/txoutbox/internal/outboxsql"

// statements are the WAL relay's SQL, rendered once for its table when the
// relay is built. The statements that name the publication or the slot as
// identifiers (WALCreatePublication, WALSetMarker) are built where they
// run: Run may key those names by the table's schema (resolveNames).
type statements struct {
	horizon, horizonPassed, cleanupFloor, deleteConfirmed, markConfirmed, prune    string
	settled, markDead, rowExists, deadMax, settledMax, settledMaxSettings          string
	pollingRelays, scheduled, backlog, markPublished, highestRow                   string
	takeoverLock, takeoverTimeout, markAllBut, unpublished, peek                   string
	server, tableNames, names, messagePrefix, slot, publication, ceiling, position string
	initLock, initUnlock, slotGate, slotUngate, dropSlot                           string
	// publicationCheck is in one form per server: with column lists and row
	// filters (PostgreSQL 15 and later), and without.
	publicationCheck, publicationCheckOld string
	table                                 string // the table's quoted name, the argument of the statements keyed by its oid
}

// render renders the statements for the table of n.
func render(n outboxsql.Names) *statements {
	return &statements{
		horizon:             n.Render(outboxsql.WALHorizon),
		horizonPassed:       outboxsql.WALHorizonPassed,
		cleanupFloor:        n.Render(outboxsql.WALCleanupFloor),
		deleteConfirmed:     n.Render(outboxsql.WALDeleteConfirmed),
		markConfirmed:       n.Render(outboxsql.WALMarkConfirmed),
		prune:               n.Render(outboxsql.Prune),
		settled:             n.Render(outboxsql.WALSettled),
		markDead:            n.Render(outboxsql.WALMarkDead),
		rowExists:           n.Render(outboxsql.WALRowExists),
		deadMax:             n.Render(outboxsql.WALDeadMax),
		settledMax:          n.Render(outboxsql.WALSettledMax),
		settledMaxSettings:  outboxsql.WALSettledMaxSettings,
		pollingRelays:       n.Render(outboxsql.WALPollingRelays),
		scheduled:           n.Render(outboxsql.WALScheduled),
		backlog:             n.Render(outboxsql.WALBacklog),
		markPublished:       n.Render(outboxsql.WALMarkPublished),
		highestRow:          n.Render(outboxsql.WALHighestRow),
		takeoverLock:        n.Render(outboxsql.WALTakeoverLock),
		takeoverTimeout:     outboxsql.WALTakeoverTimeout,
		markAllBut:          n.Render(outboxsql.WALMarkAllBut),
		unpublished:         n.Render(outboxsql.WALUnpublished),
		peek:                outboxsql.WALPeek,
		server:              outboxsql.WALServer,
		tableNames:          outboxsql.WALTable,
		names:               outboxsql.WALNames,
		messagePrefix:       outboxsql.WALMessagePrefix,
		slot:                outboxsql.WALSlot,
		publication:         outboxsql.WALPublication,
		ceiling:             outboxsql.WALCeiling,
		position:            outboxsql.WALPosition,
		initLock:            outboxsql.WALInitLock,
		initUnlock:          outboxsql.WALInitUnlock,
		slotGate:            outboxsql.WALSlotGate,
		slotUngate:          outboxsql.WALSlotUngate,
		dropSlot:            outboxsql.WALDropSlot,
		publicationCheck:    outboxsql.WALPublicationCheck(true),
		publicationCheckOld: outboxsql.WALPublicationCheck(false),
		table:               n.Table,
	}
}
