// Package outboxsql holds every SQL statement txoutbox runs against the
// outbox tables, in one place. Statements are templates over the table
// names, rendered once when a component is built from an already validated
// and quoted txoutbox.Table, so no user input is ever interpolated.
package outboxsql

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Names are the quoted, schema-qualified names of the outbox tables and the
// NOTIFY channel. Build them with NamesFor.
type Names struct {
	Table  string // the events table, e.g. "public"."outbox"
	Relays string // live relays and their heartbeats
	Shards string // which relay owns which shard
	Floor  string // the claim floor (schema version 8, see ClaimFloor)
	// Versions is the migrator's record of the applied schema versions
	// (migrations.Migrator).
	Versions string
	Channel  string // the LISTEN/NOTIFY channel, a plain string (not an identifier)
	// Base is the table's own name, unquoted, which the migrator gives
	// its indexes' names ("events" has events_lane_idx): MySQL's
	// statements name the index they read ({{index lane}}). Empty:
	// TableNameDefault.
	Base string
}

// Render substitutes the placeholders {{table}}, {{relays}}, {{shards}},
// {{floor}}, {{channel}} (the latter as a SQL string literal),
// {{tableliteral}} (the table's quoted name as a SQL string literal, for
// ::regclass and the functions that take a table's name as text, where
// {{table}} between quotes would be ended by a quote in the schema's
// name), {{relaysliteral}}, {{shardsliteral}} and {{floorliteral}} (the
// same for the companions), and
// {{claimkey}} and {{prunekey}} (the claim gate's and prune lock's
// two-part advisory lock keys) in a statement template; {{claimkey $4}} is
// the claim gate's key of the table named by parameter $4, the same
// lock as {{claimkey}} for that table; {{index lane}} is the table's
// index the migrator named outbox_lane_idx, quoted for MySQL.
func (n Names) Render(tmpl string) string {
	tmpl = indexRef.ReplaceAllStringFunc(tmpl, func(ref string) string {
		return n.Index(indexRef.FindStringSubmatch(ref)[1])
	})
	return strings.NewReplacer(
		"{{table}}", n.Table,
		"{{versions}}", n.Versions,
		"{{tableliteral}}", quoteLiteral(n.Table),
		"{{relays}}", n.Relays,
		"{{relaysliteral}}", quoteLiteral(n.Relays),
		"{{shardsliteral}}", quoteLiteral(n.Shards),
		"{{floorliteral}}", quoteLiteral(n.Floor),
		"{{shards}}", n.Shards,
		"{{floor}}", n.Floor,
		"{{channel}}", quoteLiteral(n.Channel),
		"{{claimkey $4}}", lockKey("txoutbox.claim", "$4::text"),
		"{{claimkey}}", lockKey("txoutbox.claim", quoteLiteral(n.Table)),
		"{{prunekey}}", lockKey("txoutbox.prune", quoteLiteral(n.Table)),
	).Replace(tmpl)
}

// indexRef is an index placeholder of Render: {{index lane}}.
var indexRef = regexp.MustCompile(`\{\{index ([a-z_]+)\}\}`)

// Index is the table's index of a kind ("lane": outbox_lane_idx under the
// default name) as MySQL names it in FORCE INDEX, quoted.
func (n Names) Index(kind string) string {
	base := n.Base
	if base == "" {
		base = TableNameDefault
	}
	return MySQLQuote(base + "_" + kind + "_idx")
}

// lockKey is a two-part advisory lock key: a class, and the OID of the
// table that the SQL text expression table names, shifted into int4's
// range (a bijection). Keyed by the OID, every spelling of the table (with
// its schema, or through search_path) takes the same lock, and no two
// tables share one: a relay configured with Table{} and an operator naming
// the schema serialize as they must.
func lockKey(class, table string) string {
	return "hashtext(" + quoteLiteral(class) + "), (" + table + "::regclass::oid::bigint - 2147483648)::int"
}

func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// InsertColumns is the column list of an event insert. InsertParamsPerRow
// placeholders are bound per event: one for each column up to created_at,
// then the event's NotBefore (NULL for at once), from which the last three
// columns are computed by the database clock (see Insert).
const InsertColumns = "event_id, topic, aggregate_type, aggregate_id, event_type, content_type, payload, headers, created_at, " +
	"not_before, retry_at, next_attempt_at"

// InsertParamsPerRow is the number of bind parameters one event takes.
const InsertParamsPerRow = 10

// Insert builds a multi-row insert of rows events. With notify, the same
// statement also sends one NOTIFY on the channel; PostgreSQL delivers it at
// commit, and only if the transaction commits. One statement means one round
// trip for any number of rows.
//
// A NotBefore later than the statement's clock (statement_timestamp(),
// not now(): the writer's transaction may have been open for a while) is
// written to not_before and to retry_at (schema version 7), so the claim
// reads the row as a retry in backoff until then (see Claim), and to
// next_attempt_at, which relays of earlier versions wait for; an earlier
// one, or NULL, leaves the row a first attempt, due at once, as if it had
// none (and schema version 12's trigger lets it into a streamed table).
func Insert(n Names, rows int, notify bool) string {
	var b strings.Builder
	b.Grow(400 + rows*80)
	if notify {
		b.WriteString("WITH ins AS (")
	}
	b.WriteString("INSERT INTO ")
	b.WriteString(n.Table)
	b.WriteString(" (" + InsertColumns + ") SELECT " + insertValues + " FROM (VALUES ")
	p := 1
	for r := 0; r < rows; r++ {
		if r > 0 {
			b.WriteByte(',')
		}
		b.WriteString("($")
		b.WriteString(strconv.Itoa(p))
		b.WriteString("::uuid")
		for c := 1; c < InsertParamsPerRow; c++ {
			b.WriteString(",$")
			b.WriteString(strconv.Itoa(p + c))
			switch c {
			case 6:
				b.WriteString("::bytea")
			case 7:
				b.WriteString("::jsonb")
			case 8, 9:
				b.WriteString("::timestamptz")
			}
		}
		b.WriteByte(')')
		p += InsertParamsPerRow
	}
	b.WriteString(") AS v (" + insertParams + ")")
	if notify {
		b.WriteString(" RETURNING 1) SELECT pg_notify(")
		b.WriteString(quoteLiteral(n.Channel))
		b.WriteString(", '') FROM (SELECT 1 FROM ins LIMIT 1) AS one")
	}
	return b.String()
}

// insertParams names the values bound per row; insertValues computes
// InsertColumns from them.
const (
	insertParams = "event_id, topic, aggregate_type, aggregate_id, event_type, content_type, payload, headers, created_at, nb"
	insertValues = "v.event_id, v.topic, v.aggregate_type, v.aggregate_id, v.event_type, v.content_type, v.payload, v.headers, v.created_at, " +
		"CASE WHEN v.nb > statement_timestamp() THEN v.nb END, CASE WHEN v.nb > statement_timestamp() THEN v.nb ELSE '-infinity' END, greatest(now(), v.nb)"
)

// Interval renders d for a $n::interval parameter.
func Interval(d time.Duration) string {
	return strconv.FormatInt(d.Microseconds(), 10) + " microseconds"
}

// Int64Array renders ids as a PostgreSQL array literal, which any driver
// passes as text.
func Int64Array(ids []int64) string { return intArray(ids) }

// Int16Array renders shard numbers as a PostgreSQL array literal.
func Int16Array(v []int16) string { return intArray(v) }

// Shards is how many shards the outbox table's shard column spreads
// aggregates over (hashtext(aggregate_id) & 255).
const Shards = 256

// ShardMask renders shard numbers as a bit string of Shards bits, bit n
// (from the left) set for shard n, for a $n::varbit parameter tested with
// get_bit. Unlike "shard = ANY($n)", which a generic plan tests by scanning
// the array for every row, get_bit costs the same for any number of
// shards. Numbers outside [0, Shards) are ignored.
func ShardMask(v []int16) string {
	b := make([]byte, Shards)
	for i := range b {
		b[i] = '0'
	}
	for _, s := range v {
		if s >= 0 && int(s) < Shards {
			b[s] = '1'
		}
	}
	return string(b)
}

func intArray[T int16 | int64](v []T) string {
	var b strings.Builder
	b.Grow(len(v)*8 + 2)
	b.WriteByte('{')
	for i, n := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(int64(n), 10))
	}
	b.WriteByte('}')
	return b.String()
}

// TextArray renders strings as a PostgreSQL array literal, quoting each
// element, so any text (commas, quotes, braces) stays one element.
func TextArray(values []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range values {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// SchemaTables reads whether a migration set's table and its version
// table (<table>_schema_migrations) exist, and whether the current role
// may read the latter (true when it does not exist), from the catalogs
// only, so a component can check the schema's version without creating
// anything, and say which grant it lacks.
const SchemaTables = `SELECT to_regclass($1::text) IS NOT NULL, to_regclass($2::text) IS NOT NULL,
       coalesce(has_table_privilege(to_regclass($2::text), 'SELECT'), true), current_user`

// SchemaTablesArgs binds SchemaTables.
type SchemaTablesArgs struct {
	Table    string // the table, quoted and qualified as NamesFor quotes it
	Versions string // its version table, the same way
}

// Args returns the statement's arguments.
func (a SchemaTablesArgs) Args() []any { return []any{a.Table, a.Versions} }

// IsLockNotAvailable reports whether err is the server's SQLSTATE 55P03
// (lock_not_available): a statement gave up on a lock, at its
// lock_timeout or with NOWAIT.
func IsLockNotAvailable(err error) bool { return SQLState(err) == "55P03" }
