package outboxsql

import (
	"strconv"
	"strings"
	"time"
)

// Partitioned outbox tables (docs/partitions.md). The outbox may be a table
// partitioned by ranges of id: its name is then the partitioned parent's,
// every statement above reads and writes through it, and the partitions
// are maintained by the statements below. A partition's name is the
// table's with "_p<first id>" appended ("_p0" for the first, which holds
// every id below the second's), or "_default" for the default partition,
// which takes the ids no range covers, so a writer never fails for want
// of a partition.

// PartitionState reads whether the table is partitioned, whether the
// current role may create and drop its partitions (it is a member of the
// table's owner), the highest id written or handed out (0 for none) and
// the claim floor (0 without one). One descent of the primary key per
// partition. The ids handed out include those of rows not committed yet,
// which the highest written leaves out (for the owner: the identity's
// sequence is its): a partition attached over them while their writer
// routes them to the default partition would fail the writer's insert
// with SQLSTATE 23514.
const PartitionState = `SELECT c.relkind = 'p', r.owner,
       greatest(coalesce((SELECT max(id) FROM {{table}}), 0),
                CASE WHEN r.owner THEN coalesce(pg_sequence_last_value(pg_get_serial_sequence({{tableliteral}}, 'id')::regclass), 0) ELSE 0 END),
       coalesce((SELECT max(floor) FROM {{floor}}), 0)
FROM pg_class c, LATERAL (SELECT pg_has_role(c.relowner, 'USAGE') AS owner) r WHERE c.oid = {{tableliteral}}::regclass`

// PartitionList lists the partitions of the table: each one's quoted,
// qualified name (always quoted, as ident.Qualified quotes) and its bound as PostgreSQL prints it ("FOR VALUES FROM
// ('1') TO ('100')", MINVALUE, or "DEFAULT"; see ParseBound).
const PartitionList = `SELECT '"' || replace(n.nspname, '"', '""') || '"."' || replace(c.relname, '"', '""') || '"',
       pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.inhparent = {{tableliteral}}::regclass`

// PartitionRows, rendered for one partition (its name as {{table}}),
// reads whether it holds unpublished rows, dead rows, and published rows
// newer than $1 (a RetentionArgs): one probe each of the claim,
// dead-letter and prune indexes. A partition below the claim floor with
// none of the three is dropped whole (PartitionDrop); one with dead rows
// is kept, and its published rows are pruned by Prune.
const PartitionRows = `SELECT EXISTS (SELECT 1 FROM {{table}} WHERE state IN ('pending', 'claimed')),
       EXISTS (SELECT 1 FROM {{table}} WHERE state = 'dead'),
       coalesce((SELECT max(published_at) FROM {{table}} WHERE state = 'published') >= now() - $1::interval, false)`

// RetentionArgs binds PartitionRows.
type RetentionArgs struct {
	Retention time.Duration // $1: published rows newer than this are kept
}

// Args returns the parameters in order.
func (a RetentionArgs) Args() []any { return []any{Interval(a.Retention)} }

// PartitionSettings runs first in every transaction that changes the
// partitions: a lock wait longer than $1 fails (the next round tries
// again) rather than queueing an ACCESS EXCLUSIVE lock that every claim
// and writer would wait behind, and no statement runs longer than $2.
const PartitionSettings = `SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)`

// PartitionSettingsArgs binds PartitionSettings.
type PartitionSettingsArgs struct {
	LockTimeout, StatementTimeout time.Duration
}

// Args returns the parameters in order.
func (a PartitionSettingsArgs) Args() []any {
	return []any{millis(a.LockTimeout), millis(a.StatementTimeout)}
}

// millis is d as a setting in milliseconds, at least 1 (0 would turn a
// timeout off).
func millis(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 1), 10) + "ms" }

// Partition DDL, rendered by RenderPartition: {{table}} is the parent,
// {{partition}} the partition, {{from}} and {{to}} its bounds. A new
// partition is created apart and attached, which takes a SHARE UPDATE
// EXCLUSIVE lock on the parent (writers and claims go on) and an ACCESS
// EXCLUSIVE one on the default partition, which PostgreSQL reads to check
// it holds no row of the new range (it is empty unless writers outran the
// partitions ahead). fillfactor is schema version 3's.
const (
	PartitionCreate = `CREATE TABLE {{partition}} (LIKE {{table}} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED
    INCLUDING STORAGE INCLUDING COMPRESSION) WITH (fillfactor = 50)`
	// PartitionTableOwner reads the parent's owner, quoted, for
	// PartitionOwner.
	PartitionTableOwner = `SELECT quote_ident(pg_get_userbyid(relowner)) FROM pg_class WHERE oid = {{tableliteral}}::regclass`
	// PartitionOwner gives a new partition the parent's owner ({{object}},
	// as PartitionTableOwner reads it), whichever role created it (a
	// superuser, a member of the owner): the owner's roles drop it past
	// retention and prune it directly. Two statements rather than a DO
	// block: the names would go into a dollar-quoted body and a format
	// string, where a schema's name holding $$, ' or % would change them.
	PartitionOwner         = `ALTER TABLE {{partition}} OWNER TO {{object}}`
	PartitionAttach        = `ALTER TABLE {{table}} ATTACH PARTITION {{partition}} FOR VALUES FROM ({{from}}) TO ({{to}})`
	PartitionAttachDefault = `ALTER TABLE {{table}} ATTACH PARTITION {{partition}} DEFAULT`
	// PartitionLock holds the partition while its rows are checked again
	// before PartitionDrop: an operator's replay or retry of its rows
	// waits, then finds them gone. It locks the parent first, as every
	// statement through the parent does (and DROP TABLE of a partition):
	// holding the partition alone, the drop's lock on the parent would
	// wait for a claim that holds the parent and waits for the partition,
	// a deadlock.
	PartitionLock = `LOCK TABLE ONLY {{table}}, {{partition}} IN ACCESS EXCLUSIVE MODE`
	// PartitionDrop drops a partition, which locks the parent ACCESS
	// EXCLUSIVE for the moment it takes (under PartitionSettings' lock
	// timeout). PostgreSQL cannot detach concurrently beside a default
	// partition, and dropping needs no detach first.
	PartitionDrop = `DROP TABLE {{partition}}`
)

// ForPartition returns n with Table naming partition (a quoted, qualified
// name), to render a table statement (Prune, PartitionRows) for that
// partition alone.
func (n Names) ForPartition(partition string) Names {
	n.Table = partition
	return n
}

// Bound is a partition's range of ids: [From, To). HasFrom and HasTo are
// false for MINVALUE and MAXVALUE; Default marks the default partition.
type Bound struct {
	From, To       int64
	HasFrom, HasTo bool
	Default        bool
}

// ParseBound reads a bound as PartitionList returns it. ok is false for a
// bound that is not a range of one bigint (not a partition of this kind).
func ParseBound(expr string) (b Bound, ok bool) {
	if expr == "DEFAULT" {
		return Bound{Default: true}, true
	}
	rest, found := strings.CutPrefix(expr, "FOR VALUES FROM (")
	if !found {
		return Bound{}, false
	}
	from, rest, found := strings.Cut(rest, ") TO (")
	if !found {
		return Bound{}, false
	}
	to, found := strings.CutSuffix(rest, ")")
	if !found {
		return Bound{}, false
	}
	var okFrom, okTo bool
	b.From, b.HasFrom, okFrom = parseBoundValue(from)
	b.To, b.HasTo, okTo = parseBoundValue(to)
	return b, okFrom && okTo
}

func parseBoundValue(s string) (v int64, finite, ok bool) {
	switch s {
	case "MINVALUE", "MAXVALUE":
		return 0, false, true
	}
	v, err := strconv.ParseInt(strings.Trim(s, "'"), 10, 64)
	return v, err == nil, err == nil
}

// PartitionVars are the names and numbers RenderPartition puts in a
// partition statement besides n's.
type PartitionVars struct {
	Partition string // {{partition}}: a partition's quoted name, qualified unless the statement renames
	Object    string // {{object}}: a quoted, unqualified index, constraint or trigger name
	Def       string // {{def}}: a definition read from the catalogs (ConvertIndexes, ConvertTriggers)
	From, To  int64  // {{from}}, {{to}}
}

// RenderPartition renders a partition statement for the outbox of n.
func RenderPartition(n Names, tmpl string, v PartitionVars) string {
	return strings.NewReplacer("{{partition}}", v.Partition, "{{object}}", v.Object, "{{def}}", v.Def,
		"{{from}}", strconv.FormatInt(v.From, 10), "{{to}}", strconv.FormatInt(v.To, 10)).Replace(n.Render(tmpl))
}

// Converting an unpartitioned outbox (docs/partitions.md). First, while
// writers and relays run, ConvertAddCheck adds a constraint that every id
// is below the first partition's end, NOT VALID (a moment's lock: it reads
// nothing), and ConvertValidate checks the rows (under a SHARE UPDATE
// EXCLUSIVE lock, which blocks no writer). Then, in one short transaction
// under an ACCESS EXCLUSIVE lock (ConvertLock): the table is renamed to
// its first partition, with its indexes, primary key, triggers and
// identity moved aside; a partitioned parent takes the name, with the same
// columns, defaults, identity (restarted after the last id), primary key,
// indexes, triggers, owner and grants; and the old table is attached as
// the partition of every id below the bound, which the validated
// constraint proves without reading it.
const (
	ConvertAddCheck  = `ALTER TABLE {{table}} ADD CONSTRAINT {{object}} CHECK (id < {{to}}) NOT VALID`
	ConvertValidate  = `ALTER TABLE {{table}} VALIDATE CONSTRAINT {{object}}`
	ConvertDropCheck = `ALTER TABLE {{table}} DROP CONSTRAINT IF EXISTS {{object}}`
	ConvertLock      = `LOCK TABLE {{table}} IN ACCESS EXCLUSIVE MODE`
	// ConvertState reads the table's kind ('r', or 'p' once converted),
	// its owner (quoted), its identity's sequence and kind ('a' for
	// ALWAYS, 'd' for BY DEFAULT), whether a foreign key references it or
	// a publication names it (either refuses the conversion), and the
	// upper bound of the constraint named $1 if it is validated (0 if not).
	ConvertState = `SELECT c.relkind::text, quote_ident(pg_get_userbyid(c.relowner)),
       coalesce(pg_get_serial_sequence({{tableliteral}}, 'id'), ''),
       coalesce((SELECT a.attidentity::text FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'id'), ''),
       EXISTS (SELECT 1 FROM pg_constraint k WHERE k.confrelid = c.oid),
       EXISTS (SELECT 1 FROM pg_publication_rel r WHERE r.prrelid = c.oid),
       coalesce((SELECT substring(pg_get_constraintdef(k.oid) FROM '< \(?''?(\d+)')::bigint FROM pg_constraint k
                 WHERE k.conrelid = c.oid AND k.conname = $1 AND k.convalidated), 0)
FROM pg_class c WHERE c.oid = {{tableliteral}}::regclass`
	// ConvertSequence is the last value the sequence $1 handed out, 0 if
	// none.
	ConvertSequence = `SELECT coalesce(pg_sequence_last_value($1::regclass), 0)`
	// ConvertIndexes lists the table's indexes: name (quoted), definition,
	// and the constraint it backs (quoted; empty for none) with that
	// constraint's definition.
	ConvertIndexes = `SELECT quote_ident(c.relname), pg_get_indexdef(i.indexrelid), coalesce(quote_ident(k.conname), ''),
       coalesce(pg_get_constraintdef(k.oid), '')
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
LEFT JOIN pg_constraint k ON k.conindid = i.indexrelid AND k.conrelid = i.indrelid
WHERE i.indrelid = {{tableliteral}}::regclass ORDER BY c.relname`
	// ConvertTriggers lists the table's own triggers: name (quoted) and
	// definition.
	ConvertTriggers = `SELECT quote_ident(tgname), pg_get_triggerdef(oid) FROM pg_trigger
WHERE tgrelid = {{tableliteral}}::regclass AND NOT tgisinternal ORDER BY tgname`
	// ConvertGrants lists the GRANT statements that give the parent the
	// table's privileges (its owner's aside), one a row.
	ConvertGrants = `SELECT format('GRANT %s ON %s TO %s%s', a.privilege_type, {{tableliteral}},
       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
       CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
FROM pg_class c, aclexplode(c.relacl) a WHERE c.oid = {{tableliteral}}::regclass AND a.grantee <> c.relowner`
	ConvertRename           = `ALTER TABLE {{table}} RENAME TO {{partition}}`
	ConvertRenameIndex      = `ALTER INDEX {{def}} RENAME TO {{object}}`
	ConvertRenameConstraint = `ALTER TABLE {{partition}} RENAME CONSTRAINT {{def}} TO {{object}}`
	ConvertDropTrigger      = `DROP TRIGGER {{object}} ON {{partition}}`
	ConvertDropIdentity     = `ALTER TABLE {{partition}} ALTER COLUMN id DROP IDENTITY`
	ConvertCreateParent     = `CREATE TABLE {{table}} (LIKE {{partition}} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED
    INCLUDING STORAGE INCLUDING COMPRESSION INCLUDING COMMENTS INCLUDING STATISTICS) PARTITION BY RANGE (id)`
	ConvertParentCheck    = `ALTER TABLE {{table}} DROP CONSTRAINT {{object}}`
	ConvertIdentityAlways = `ALTER TABLE {{table}} ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (START WITH {{from}})`
	ConvertIdentityByDef  = `ALTER TABLE {{table}} ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (START WITH {{from}})`
	ConvertAddConstraint  = `ALTER TABLE {{table}} ADD CONSTRAINT {{object}} {{def}}`
	ConvertOwner          = `ALTER TABLE {{table}} OWNER TO {{object}}`
	ConvertAttachFirst    = `ALTER TABLE {{table}} ATTACH PARTITION {{partition}} FOR VALUES FROM (MINVALUE) TO ({{to}})`
)
