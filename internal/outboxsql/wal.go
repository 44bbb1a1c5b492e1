package outboxsql

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/txoutbox/txoutbox/internal/ident"
)

// Statements of the WAL relay (relay/walrelay): it reads the outbox from a
// logical replication slot and touches the table only to clean it up.

// WALName is the default name of the publication and of the replication
// slot of outbox table name (empty: TableNameDefault) in schema of
// database: "txoutbox_<database>_<schema>_<name>" made of lower-case
// letters, digits and underscores (a slot's alphabet; every other
// character becomes an underscore) and cut to 41 bytes, then "_" and 12
// hex digits of a SHA-256 of the three names. A slot is the server's, not
// the database's: the database in the name keeps two databases' relays of
// tables of one name off each other's slot, and the hash keeps names
// apart that read alike once made lower-case, cut or stripped of other
// characters. walNameSQL computes the same name in SQL.
func WALName(database, schema, name string) string {
	if name == "" {
		name = TableNameDefault
	}
	const readable = ident.MaxLen - len("txoutbox_") - len("_") - walNameHash
	var b strings.Builder
	b.WriteString("txoutbox_")
	for _, r := range database + "_" + schema + "_" + name {
		if b.Len() == len("txoutbox_")+readable {
			break
		}
		switch {
		case r >= 'A' && r <= 'Z':
			b.WriteRune(r + 'a' - 'A')
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(database + "\x00" + schema + "\x00" + name))
	b.WriteByte('_')
	b.WriteString(hex.EncodeToString(sum[:])[:walNameHash])
	return b.String()
}

// walNameHash is how many hex digits of the hash end a WALName.
const walNameHash = 12

// walNameSQL is WALName in SQL for the table rel (an expression of its
// oid), in the current database and the table's own schema. The character
// class and the alphabet are spelled out, as ranges and lower() may follow
// the database's locale; sha256 rather than md5, which a server in FIPS
// mode refuses.
func walNameSQL(rel string) string {
	const (
		upper   = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		lower   = "abcdefghijklmnopqrstuvwxyz"
		allowed = lower + "0123456789_"
	)
	return `(SELECT 'txoutbox_' || left(regexp_replace(translate(current_database() || '_' || wn.nspname || '_' || wc.relname, '` + upper + `', '` + lower + `'),
            '[^` + allowed + `]', '_', 'g'), ` + strconv.Itoa(ident.MaxLen-len("txoutbox_")-1-walNameHash) + `) || '_' ||
        left(encode(sha256(convert_to(current_database(), 'UTF8') || decode('00', 'hex') || convert_to(wn.nspname, 'UTF8') || decode('00', 'hex') || convert_to(wc.relname, 'UTF8')), 'hex'), ` + strconv.Itoa(walNameHash) + `)
    FROM pg_class wc JOIN pg_namespace wn ON wn.oid = wc.relnamespace WHERE wc.oid = ` + rel + `)`
}

// WALNameOf is WALName of table $1 (its quoted name, found on the
// search_path when unqualified) in the current database, computed by the
// server: the default slot name of a table, where no relay has said what
// its schema and database are.
var WALNameOf = `SELECT ` + walNameSQL(`$1::regclass`)

// WALLegacyName is the default name of the publication and slot of an
// outbox table before the names were keyed by the database:
// "txoutbox_<schema>_<name>" in lower case, hashed to fit 63 bytes
// ("txoutbox_<name>" without the schema, older still). A relay adopts a
// slot of this name in its own database (see walrelay's resolveNames) and
// never creates one: once that slot is dropped, it goes on under WALName.
func WALLegacyName(schema, name string) string {
	n := strings.ToLower(prefixed("txoutbox_", "_", schema, name))
	if len(n) > ident.MaxLen {
		n = fmt.Sprintf("%s_%016x", n[:ident.MaxLen-17], hash64(n))
	}
	return n
}

// Literal quotes s as a SQL string literal, for the few places that take
// no parameters (COMMENT, SET TRANSACTION SNAPSHOT, replication commands).
func Literal(s string) string { return quoteLiteral(s) }

// WALMessagePrefix returns the prefix of the logical decoding messages
// (pg_logical_emit_message) that carry the table-less events of an outbox
// table, for $1, the table as Names.Table renders it: "txoutbox:" and the
// table's oid. The writer and the relay each resolve the name on their own
// connection, so a writer that names the table schema-qualified and a
// relay that finds it on its search_path agree; two outbox tables of the
// same name in different schemas do not. Messages are database-wide: every
// slot of the database sees them.
const WALMessagePrefix = `SELECT 'txoutbox:' || $1::regclass::oid::text`

// WALEmit records rows table-less events: $1 is the table (see
// WALMessagePrefix), $2... the encoded events, emitted left to right as
// transactional messages, so they commit or roll back with the caller's
// transaction. Plain bytea parameters work with any driver. It emits
// nothing and returns no row unless wal_level is logical and a WAL
// relay's slot streams the table (walRelayStreams): an event no slot
// decodes would be written nowhere.
func WALEmit(rows int) string {
	var b strings.Builder
	b.Grow(512 + rows*56)
	b.WriteString(`WITH p AS (SELECT 'txoutbox:' || $1::regclass::oid::text AS prefix
    WHERE current_setting('wal_level') = 'logical' AND EXISTS (SELECT 1 FROM pg_replication_slots s
      WHERE s.slot_type = 'logical' AND s.plugin = 'pgoutput' AND s.database = current_database() AND ` + walRelayStreams("$1::regclass") + `)) SELECT `)
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("pg_logical_emit_message(true, p.prefix, $")
		b.WriteString(strconv.Itoa(i + 2))
		b.WriteString("::bytea)")
	}
	b.WriteString(" FROM p")
	return b.String()
}

// WALServer reports what the WAL relay needs of the server: its version
// number, wal_level, and whether the current role may replicate.
const WALServer = `SELECT current_setting('server_version_num')::int, current_setting('wal_level'),
    coalesce((SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user), false)`

// WALPublication returns publication $1's comment, the WAL relay's marker
// of an unfinished slot initialisation, and no row when it does not exist.
const WALPublication = `SELECT coalesce(obj_description(oid, 'pg_publication'), '') FROM pg_publication WHERE pubname = $1`

// WALCreatePublication publishes the outbox table's inserts only: the
// relay needs nothing else, and deletes by its cleanup stay out of the
// stream. pub is a validated identifier.
//
// With columnList (PostgreSQL 15 and later) it publishes only WALColumns,
// the columns an event is built from, rather than every column: the
// walsender then encodes and sends none of the state, retry and lease
// columns, which a new row holds only as defaults the relay does not read.
func WALCreatePublication(n Names, pub string, columnList bool) string {
	table := n.Table
	if columnList {
		table += " (" + WALColumns + ")"
	}
	return "CREATE PUBLICATION " + ident.Quote(pub) + " FOR TABLE " + table + " WITH (publish = 'insert', publish_via_partition_root = true)"
}

// WALSetMarker sets (or with an empty marker clears) the publication's
// comment. COMMENT takes no parameters; both names are validated
// identifiers and the marker is quoted as a literal.
func WALSetMarker(pub, marker string) string {
	if marker == "" {
		return "COMMENT ON PUBLICATION " + ident.Quote(pub) + " IS NULL"
	}
	return "COMMENT ON PUBLICATION " + ident.Quote(pub) + " IS " + quoteLiteral(marker)
}

// WALDropPublication drops the publication pub, a validated identifier:
// one the relay created and set no slot up for.
func WALDropPublication(pub string) string {
	return "DROP PUBLICATION " + ident.Quote(pub)
}

// WALSlot reports replication slot $1: whether a walsender holds it, its
// wal_status, its confirmed position, its output plugin and database,
// how many bytes of WAL it holds back behind the current position, and
// whether its database is the current one. Slots are the server's: one
// of another database is never this database's outbox's.
const WALSlot = `SELECT active, coalesce(wal_status, ''), coalesce(confirmed_flush_lsn::text, '0/0'), coalesce(plugin, ''),
    coalesce(database, ''), coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint,
    coalesce(database = current_database(), false)
    FROM pg_replication_slots WHERE slot_name = $1`

// WALDropSlot drops slot $1 if it is a slot of the current database, and
// returns a row only then: a slot name is the server's, and the slot of
// another database's outbox must never be dropped for this one's.
const WALDropSlot = `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`

// WALInitLock is the session advisory lock held while a relay creates the
// slot and publishes the rows written before it: one initialiser at a time.
const WALInitLock = `SELECT pg_try_advisory_lock(hashtext('txoutbox.wal.' || $1))`

// WALInitUnlock releases WALInitLock.
const WALInitUnlock = `SELECT pg_advisory_unlock(hashtext('txoutbox.wal.' || $1))`

// WALSlotGate takes OpsWALGate exclusively for the session, while the
// relay creates its slot; $1 is the table's quoted name.
const WALSlotGate = `SELECT pg_advisory_lock(` + walGateKey + `)`

// WALSlotUngate releases WALSlotGate.
const WALSlotUngate = `SELECT pg_advisory_unlock(` + walGateKey + `)`

// WALColumns are the columns the WAL relay reads of a row, in the order
// its decoder expects them when it reads the table (the stream names them).
const WALColumns = "id, event_id, topic, aggregate_type, aggregate_id, event_type, content_type, payload, headers, created_at"

// WALBacklog lists up to $2 unpublished rows with ids above $1, in id
// order, on the claim index: one page of the rows a relay publishes when it
// creates a slot (under the slot's exported snapshot, exactly the rows
// committed before the slot existed) or takes over one it did not make.
const WALBacklog = `SELECT ` + WALColumns + ` FROM {{table}} WHERE state IN ('pending', 'claimed') AND id > $1 ORDER BY id LIMIT $2`

// BacklogArgs binds WALBacklog.
type BacklogArgs struct {
	After int64 // $1: the page starts after this id
	Limit int   // $2: the most rows of a page
}

// Args returns the parameters in order.
func (a BacklogArgs) Args() []any { return []any{a.After, a.Limit} }

// WALMarkPublished marks rows $1 published, in one statement, after the
// broker acknowledged them: the rows of the backlog the relay published
// when it created the slot, and the confirmed rows the cleanup keeps.
const WALMarkPublished = `UPDATE {{table}} SET state = 'published', published_at = now(), lease_owner = NULL, lease_expires_at = NULL
    WHERE id = ANY($1::bigint[]) AND state IN ('pending', 'claimed')`

// WALMarkDead records that the broker refused row $1 for good after $2
// attempts, the last failing with $3.
const WALMarkDead = `UPDATE {{table}} SET state = 'dead', attempts = $2, last_error = $3, lease_owner = NULL, lease_expires_at = NULL
    WHERE id = $1 AND state IN ('pending', 'claimed')`

// MarkDeadArgs binds WALMarkDead.
type MarkDeadArgs struct {
	ID       int64  // $1
	Attempts int    // $2: the publishes tried, the last one refused for good
	Reason   string // $3: why the last one failed
}

// Args returns the parameters in order.
func (a MarkDeadArgs) Args() []any { return []any{a.ID, a.Attempts, a.Reason} }

// WALRowExists reports whether row $1 exists (visible to the statement).
const WALRowExists = `SELECT EXISTS (SELECT 1 FROM {{table}} WHERE id = $1)`

// WALHorizon starts a cleanup round: the highest row id now, and the
// first transaction id not yet assigned.
const WALHorizon = `SELECT coalesce((SELECT max(id) FROM {{table}}), 0), pg_snapshot_xmax(pg_current_snapshot())::text::bigint`

// WALHorizonPassed reports whether every transaction below $1 has ended,
// and the WAL insert position: once the slot is confirmed up to it, every
// row those transactions inserted was published.
const WALHorizonPassed = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint >= $1, pg_current_wal_insert_lsn()::text`

// walInsertedBefore matches rows inserted by a transaction (or
// subtransaction) id below $3, a 64-bit id compared with the row's 32-bit
// xmin modulo 2^32. A transaction may take a row id (nextval) before it
// has a transaction id; such a row has an id below the round's highest but
// an xmin at or above $3, and waits for a later round.
const walInsertedBefore = `((($3::bigint % 4294967296) - xmin::text::bigint + 4294967296) % 4294967296) BETWEEN 1 AND 2147483647`

// WALDeleteConfirmed deletes up to $2 unpublished rows with ids above $4
// and up to $1, inserted before transaction $3 (see WALHorizon): rows the
// slot has confirmed, so the broker acknowledged them. Dead rows stay. It
// returns how many it deleted and the highest id, where the next batch
// starts: each batch walks the index from there, not over the entries of
// rows deleted before (dead until vacuum).
const WALDeleteConfirmed = `WITH d AS (DELETE FROM {{table}} WHERE id IN (
    SELECT id FROM {{table}} WHERE id > $4 AND id <= $1 AND state IN ('pending', 'claimed') AND ` + walInsertedBefore + `
    ORDER BY id LIMIT $2) RETURNING id)
SELECT count(*), coalesce(max(id), $4) FROM d`

// WALMarkConfirmed marks the rows of WALDeleteConfirmed published instead:
// for a relay that keeps published rows for a retention window.
const WALMarkConfirmed = `WITH d AS (UPDATE {{table}} SET state = 'published', published_at = now() WHERE id IN (
    SELECT id FROM {{table}} WHERE id > $4 AND id <= $1 AND state IN ('pending', 'claimed') AND ` + walInsertedBefore + `
    ORDER BY id LIMIT $2) RETURNING id)
SELECT count(*), coalesce(max(id), $4) FROM d`

// ConfirmedArgs binds WALDeleteConfirmed and WALMarkConfirmed.
type ConfirmedArgs struct {
	MaxID int64 // $1: the round's highest id (WALHorizon)
	Batch int   // $2: the most rows one statement removes
	Xmax  int64 // $3: the round's first unassigned transaction id (WALHorizon)
	After int64 // $4: the batch starts after this id
}

// Args returns the parameters in order.
func (a ConfirmedArgs) Args() []any { return []any{a.MaxID, a.Batch, a.Xmax, a.After} }

// WALCleanupFloor is where a cleanup round starts: the lowest unpublished
// id up to $1 (on the claim index, which holds only unpublished rows), or
// $1 + 1.
const WALCleanupFloor = `SELECT coalesce(min(id), $1 + 1) FROM {{table}} WHERE id <= $1 AND state IN ('pending', 'claimed')`

// WALTakeoverLock blocks new events while the takeover decides which rows
// the slot has confirmed: SHARE conflicts with the writers' inserts and
// waits for the transactions that have inserted to end.
const WALTakeoverLock = `LOCK TABLE {{table}} IN SHARE MODE`

// WALPeek returns the changes slot $1 has not confirmed, decoded by
// pgoutput for publication $2, without consuming them. Values come in
// binary, as the stream sends them, so the session's settings (bytea_output,
// DateStyle) do not change how they read.
const WALPeek = `SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
    'proto_version', '1', 'publication_names', $2, 'messages', 'true', 'binary', 'true')`

// PeekArgs binds WALPeek.
type PeekArgs struct {
	Slot        string // $1
	Publication string // $2
}

// Args returns the parameters in order.
func (a PeekArgs) Args() []any { return []any{a.Slot, a.Publication} }

// WALFlush, run in a transaction of its own, makes its commit flush the
// WAL: it writes a transactional logical message (its prefix has no colon,
// so no outbox's relay takes it for an event) and commits synchronously,
// locally, which flushes all WAL before it.
const WALFlush = `SELECT set_config('synchronous_commit', 'local', true), pg_logical_emit_message(true, 'txoutbox.takeover', '')`

// WALUnpublished counts the unpublished rows: those a takeover leaves
// pending, for the polling relay.
const WALUnpublished = `SELECT count(*) FROM {{table}} WHERE state IN ('pending', 'claimed')`

// WALTakeoverTimeout bounds the takeover's wait for its table lock ($1, a
// TimeoutArgs) for the rest of the transaction.
const WALTakeoverTimeout = `SELECT set_config('lock_timeout', $1, true)`

// WALMarkAllBut marks every unpublished row published except rows $1: the
// takeover's rows the slot confirmed.
const WALMarkAllBut = `UPDATE {{table}} SET state = 'published', published_at = now(), lease_owner = NULL, lease_expires_at = NULL
    WHERE state IN ('pending', 'claimed') AND NOT (id = ANY($1::bigint[]))`

// WALSettled returns which of rows $1 the table holds as published or
// dead: a relay resuming from the slot skips them, published before a
// crash of PostgreSQL moved the slot's position back. A row it does not
// find is published: it may be deleted by the cleanup, or committed in the
// WAL but not yet visible (the walsender can send a commit before it is).
const WALSettled = `SELECT id FROM {{table}} WHERE id = ANY($1::bigint[]) AND state IN ('published', 'dead')`

// WALPosition is the server's current WAL position.
const WALPosition = `SELECT pg_current_wal_lsn()::text`

// WALSettledMax is the highest id of a row the table holds as dead or
// published, 0 for none (see walrelay's resume). Dead rows are in
// outbox_dead_idx; the highest published row is found walking the primary
// key down from its top, past the rows not settled yet, which needs
// sequential scans and sorts off (WALSettledMaxSettings). It costs the
// backlog above that row, so it runs only for a slot whose marker has no
// settled row (see walrelay's marker); WALDeadMax serves the others.
const WALSettledMax = `SELECT greatest(0,
       (SELECT id FROM {{table}} WHERE state = 'dead' ORDER BY id DESC LIMIT 1),
       (SELECT id FROM {{table}} WHERE state = 'published' ORDER BY id DESC LIMIT 1))`

// WALDeadMax is the highest id of a dead row, 0 for none: one descent of
// outbox_dead_idx.
const WALDeadMax = `SELECT coalesce((SELECT id FROM {{table}} WHERE state = 'dead' ORDER BY id DESC LIMIT 1), 0)`

// WALHighestRow is the table's highest id, 0 for none: one descent of the
// primary key.
const WALHighestRow = `SELECT coalesce((SELECT id FROM {{table}} ORDER BY id DESC LIMIT 1), 0)`

// WALSettledMaxSettings runs first in WALSettledMax's transaction: the
// planner, misled by statistics that count no published rows, would
// rather read the whole table than walk the primary key down.
const WALSettledMaxSettings = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_sort', 'off', true),
       set_config('enable_bitmapscan', 'off', true)`

// WALPublicationCheck reads what the WAL relay needs to know of
// publication $1 for table $2 (its quoted name), with $3 the columns it
// reads: whether it publishes inserts, whether it carries the table, its
// row filter ("" for none), the columns of $3 it does not publish, and a
// fingerprint of the catalog rows that decide what it streams of the
// table (the publication's, the table's membership, the table's columns:
// a column dropped and added back has a new number), so
// a change in between two checks is seen even when the second one finds
// the publication right again. COMMENT ON PUBLICATION (the relay's marker)
// writes pg_description and leaves the fingerprint alone. No row: the
// publication does not exist. columnLists is false before PostgreSQL 15,
// which has neither row filters nor column lists.
func WALPublicationCheck(columnLists bool) string {
	attnames, rowfilter, schemas := `(SELECT array_agg(a.attname::text) FROM pg_attribute a WHERE a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped)`, `NULL::text`, `''`
	if columnLists {
		attnames, rowfilter = `pt.attnames::text[]`, `pt.rowfilter`
		schemas = `coalesce((SELECT string_agg(pn.oid::text || ':' || pn.xmin::text, ',') FROM pg_publication_namespace pn WHERE pn.pnpubid = p.oid), '')`
	}
	return `WITH t AS (SELECT c.oid, c.relname, n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $2::regclass)
SELECT p.pubinsert, pt.pubname IS NOT NULL, coalesce(` + rowfilter + `, ''),
       coalesce((SELECT string_agg(col, ', ') FROM unnest($3::text[]) col WHERE pt.pubname IS NOT NULL AND NOT col = ANY(coalesce(` + attnames + `, '{}'))), ''),
       p.xmin::text || '/' || p.puballtables::text || '/' ||
       coalesce((SELECT string_agg(pr.oid::text || ':' || pr.xmin::text, ',') FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid = t.oid), '') || '/' ||
       ` + schemas + ` || '/' || (SELECT md5(string_agg(a.attnum || ':' || a.attname || ':' || a.atttypid, ',' ORDER BY a.attnum))
           FROM pg_attribute a WHERE a.attrelid = t.oid AND a.attnum > 0)
FROM pg_publication p CROSS JOIN t
LEFT JOIN pg_publication_tables pt ON pt.pubname = p.pubname AND pt.schemaname = t.nspname AND pt.tablename = t.relname
WHERE p.pubname = $1`
}

// PublicationCheckArgs binds WALPublicationCheck.
type PublicationCheckArgs struct {
	Publication string   // $1
	Table       string   // $2: the table's quoted name (Names.Table)
	Columns     []string // $3: the columns the relay reads
}

// Args returns the parameters in order.
func (a PublicationCheckArgs) Args() []any { return []any{a.Publication, a.Table, a.Columns} }

// WALCeiling is the WAL insert position while replication slot $1 is
// streamed by the walsender of process $2, and no row otherwise: the
// relay's next ceiling (see walrelay's owner marker). Read before the
// marker is written, in the same transaction, it is below the position of
// any slot created after another process took the slot over.
const WALCeiling = `SELECT pg_current_wal_insert_lsn()::text FROM pg_replication_slots WHERE slot_name = $1 AND active_pid = $2`

// CeilingArgs binds WALCeiling.
type CeilingArgs struct {
	Slot string // $1
	PID  uint32 // $2: the walsender's process id
}

// Args returns the parameters in order.
func (a CeilingArgs) Args() []any { return []any{a.Slot, int64(a.PID)} }

// WALTable returns the schema and name of table $1 (its quoted name,
// found on the search_path when unqualified) and the current database:
// what the default names of its publication and slot are made of
// (WALName).
const WALTable = `SELECT n.nspname, c.relname, current_database()
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1::regclass`

// WALNames reports, for each name of $2 in order, what exists of that
// name for table $1 (its quoted name): whether a publication of the name
// exists, whether it carries the table, and whether a replication slot of
// the name exists in the current database. A relay picks its default
// names from them (see walrelay's resolveNames).
var WALNames = `SELECT c.name, p.oid IS NOT NULL, coalesce(` + publicationCarries("$1::regclass") + `, false),
    EXISTS (SELECT 1 FROM pg_replication_slots s WHERE s.slot_name = c.name AND s.database = current_database())
FROM unnest($2::text[]) WITH ORDINALITY AS c(name, n)
LEFT JOIN pg_publication p ON p.pubname = c.name
ORDER BY c.n`

// NamesArgs binds WALNames.
type NamesArgs struct {
	Table string   // $1: the table's quoted name (Names.Table)
	Names []string // $2: the names to look up
}

// Args returns the parameters in order.
func (a NamesArgs) Args() []any { return []any{a.Table, a.Names} }

// WALPollingRelays counts the polling relays of the table that heartbeat
// within the last $1 seconds.
const WALPollingRelays = `SELECT count(*) FROM {{relays}} WHERE heartbeat_at > now() - make_interval(secs => $1::float8)`

// NotBeforeStreamedCode is the SQLSTATE with which the trigger of schema
// version 7 refuses a row with a future not_before on a table a WAL
// relay's slot streams (the WAL relay publishes at commit).
const NotBeforeStreamedCode = "TXO01"

// WALScheduled reports whether unpublished rows wait scheduled for later (a future
// not_before), on the scheduled index (schema version 7): the WAL relay
// refuses to set its slot up while any wait, since it would publish them at
// once. It reads at most one entry.
const WALScheduled = `SELECT EXISTS (SELECT 1 FROM {{table}} WHERE state IN ('pending', 'claimed') AND not_before > now())`
