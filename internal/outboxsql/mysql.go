package outboxsql

import (
	"database/sql/driver"
	"fmt"
	"strings"
	"time"
)

// Every statement txoutbox sends to MySQL and MariaDB is in this file, and
// MySQLStatements lists them all, so internal/mysqlgrammar holds each to
// MySQL 8's grammar. They keep to the SQL both servers accept: no
// RETURNING (MySQL has none), no sequences, no function only MariaDB has.
//
// Times are DATETIME(6) in UTC: the statements read the clock with
// UTC_TIMESTAMP(6), never NOW(), whose value follows the session's
// time_zone, and go-sql-driver/mysql sends a time.Time in its loc, UTC
// unless the DSN says otherwise. TIMESTAMP would convert by the session's
// time zone too, and ends in 2038.

// MySQLNeverRetried is retry_at of a row that never failed (PostgreSQL's
// '-infinity'): DATETIME's lowest value.
const MySQLNeverRetried = "1000-01-01 00:00:00"

// MySQLUnpublished is published_at of a row not published: the column is
// NOT NULL (schema version 3), so that the mark writes it in place, and
// holds DATETIME's lowest value, as retry_at does, until then.
const MySQLUnpublished = "1000-01-01 00:00:00"

// MySQLNamesFor is NamesFor for MySQL: the same names, quoted with
// backticks. A schema is refused: in MySQL a schema is a database, and the
// outbox lives in the database the connection names (Table.Schema may
// later name another one; the migrator would then have to create it).
func MySQLNamesFor(schema, name string) (Names, error) {
	if schema != "" {
		return Names{}, fmt.Errorf("%w: schema %q: on MySQL a schema is a database, and the outbox lives in the database the connection names: leave Table.Schema empty",
			ErrInvalidTable, schema)
	}
	if _, err := NamesFor("", name); err != nil {
		return Names{}, err
	}
	if name == "" {
		name = TableNameDefault
	}
	return Names{
		Table:    MySQLQuote(name),
		Relays:   MySQLQuote(name + "_relays"),
		Shards:   MySQLQuote(name + "_shards"),
		Floor:    MySQLQuote(name + "_claim_floor"),
		Versions: MySQLQuote(name + "_schema_migrations"),
		Base:     name,
	}, nil
}

// NamesForDialect is NamesFor or MySQLNamesFor by d (Unset: PostgreSQL).
func NamesForDialect(d Dialect, schema, name string) (Names, error) {
	if d == MySQL {
		return MySQLNamesFor(schema, name)
	}
	return NamesFor(schema, name)
}

// MySQLQuote quotes an identifier with backticks, any backtick in it
// doubled. The names quoted are plain (ident.Validate) and the quotes only
// keep them from reading as keywords.
func MySQLQuote(name string) string {
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}

// MySQLInsertColumns is the column list of MySQLInsert. The bind
// parameters of a row are MySQLInsertParamsPerRow: one for each column up
// to created_at, then the event's NotBefore twice (MySQLInsertArgs).
const MySQLInsertColumns = "event_id, topic, aggregate_type, aggregate_id, event_type, content_type, payload, headers, created_at, " +
	"not_before, retry_at"

// MySQLInsertParamsPerRow is the number of bind parameters one event takes.
const MySQLInsertParamsPerRow = 11

// MySQLMaxRowsPerStatement keeps one insert under MySQL's 65,535
// placeholders per prepared statement.
const MySQLMaxRowsPerStatement = 5000

// mysqlInsertRow is one row's values: NotBefore is kept only if it is
// later than the statement's clock, as on PostgreSQL (a NotBefore already
// past is due at once), and retry_at, which the claim reads, is then that
// time, so the row waits as a retry in backoff until it; otherwise the row
// is a first attempt (MySQLNeverRetried). retry_at reads not_before, set
// earlier in the same row, which both servers allow.
const mysqlInsertRow = "(?, ?, ?, ?, ?, ?, ?, ?, ?, IF(? > UTC_TIMESTAMP(6), ?, NULL), COALESCE(not_before, '" + MySQLNeverRetried + "'))"

// MySQLInsert builds a multi-row insert of rows events: one round trip for
// any number of them. There is no NOTIFY on MySQL; relays poll.
func MySQLInsert(n Names, rows int) string {
	var b strings.Builder
	b.Grow(200 + rows*(len(mysqlInsertRow)+1))
	b.WriteString("INSERT INTO ")
	b.WriteString(n.Table)
	b.WriteString(" (" + MySQLInsertColumns + ") VALUES ")
	for r := 0; r < rows; r++ {
		if r > 0 {
			b.WriteByte(',')
		}
		b.WriteString(mysqlInsertRow)
	}
	return b.String()
}

// MySQLInsertRow is one event's values for MySQLInsert.
type MySQLInsertRow struct {
	EventID       string // canonical UUID text
	Topic         string
	AggregateType string
	AggregateID   string
	EventType     string
	ContentType   string
	Payload       []byte // not nil: the column is NOT NULL
	Headers       string // a JSON object
	CreatedAt     time.Time
	NotBefore     time.Time // zero: at once
}

// AppendArgs appends the row's MySQLInsertParamsPerRow parameters to args.
func (r MySQLInsertRow) AppendArgs(args []any) []any {
	var nb any // NULL: at once
	if !r.NotBefore.IsZero() {
		nb = r.NotBefore.UTC()
	}
	return append(args, r.EventID, r.Topic, r.AggregateType, r.AggregateID, r.EventType, r.ContentType,
		r.Payload, r.Headers, r.CreatedAt.UTC(), nb, nb)
}

// MySQLInboxClaim records that consumer $1 processed event $2. INSERT
// IGNORE affects one row on the first delivery and none on a redelivery,
// whatever the connection's CLIENT_FOUND_ROWS flag (ON DUPLICATE KEY
// UPDATE would count a duplicate as one row under it). A concurrent
// duplicate waits on the first transaction's row lock, then skips it
// (committed) or inserts (rolled back), as on PostgreSQL. IGNORE also
// turns a value that does not fit into a warning: the inbox checks the
// consumer's length (MySQLInboxConsumerMaxBytes) and the event id is a
// canonical UUID, so none can reach it.
const MySQLInboxClaim = `INSERT IGNORE INTO {{table}} (consumer, event_id, processed_at) VALUES (?, ?, UTC_TIMESTAMP(6))`

// MySQLInboxConsumerMaxBytes is the longest consumer name the MySQL inbox
// table holds (VARBINARY(255)).
const MySQLInboxConsumerMaxBytes = 255

// MySQLInboxPrune deletes up to $2 of the oldest rows processed more than
// $1 microseconds ago, on the processed_at index: MySQL's single-table
// DELETE has ORDER BY and LIMIT.
const MySQLInboxPrune = `DELETE FROM {{table}} WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY processed_at LIMIT ?`

// MySQLInboxPruneArgs binds MySQLInboxPrune.
type MySQLInboxPruneArgs struct {
	OlderThan time.Duration
	Limit     int
}

// Args returns the parameters in order.
func (a MySQLInboxPruneArgs) Args() []any { return []any{a.OlderThan.Microseconds(), a.Limit} }

// MySQLTestEvents is TestEvents on MySQL: every row of the outbox, in the
// order written (id). The times come back as DATETIME text unless the
// DSN has parseTime=true: scan them with MySQLTime.
const MySQLTestEvents = `SELECT id, event_id, topic, aggregate_type, aggregate_id, event_type, content_type,
       payload, CAST(headers AS CHAR), created_at, not_before, state, attempts, COALESCE(last_error, '')
FROM {{table}} ORDER BY id`

// MySQLTestDrainable is TestDrainable on MySQL: whether unpublished rows
// are left, whether one of them may still be published by the time bound
// (MySQLTestDrainArgs), and the database clock. A row's retry_at is its
// not_before until it is tried (MySQLInsert), as on PostgreSQL.
const MySQLTestDrainable = `SELECT EXISTS (SELECT 1 FROM {{table}} WHERE state IN ('pending', 'claimed')),
    EXISTS (SELECT 1 FROM {{table}} o
            WHERE o.state IN ('pending', 'claimed') AND NOT COALESCE(o.not_before > ? AND o.retry_at > ?, FALSE)
              AND NOT EXISTS (SELECT 1 FROM {{table}} h
                              WHERE h.aggregate_id = o.aggregate_id AND h.id < o.id AND h.state IN ('pending', 'claimed')
                                AND h.not_before > ? AND h.retry_at > ?)),
    UTC_TIMESTAMP(6)`

// MySQLTestAdvance is TestAdvance on MySQL: it makes the unpublished rows
// scheduled no later than the time bound (MySQLTestDrainArgs) due now by
// moving retry_at, which the claim reads, and leaves not_before (and
// due_at, which follows it) as written.
const MySQLTestAdvance = `UPDATE {{table}} SET retry_at = UTC_TIMESTAMP(6)
WHERE state IN ('pending', 'claimed') AND not_before > UTC_TIMESTAMP(6) AND not_before <= ? AND retry_at = not_before`

// MySQLTestDrainArgs binds MySQLTestDrainable (Drainable) and
// MySQLTestAdvance.
type MySQLTestDrainArgs struct {
	Time      time.Time // Drain's deadline (MySQLTestDrainable), the test's clock (MySQLTestAdvance)
	Drainable bool
}

// Args returns the parameters in order, the time in UTC as the columns
// hold it.
func (a MySQLTestDrainArgs) Args() []any {
	t := a.Time.UTC()
	if a.Drainable {
		return []any{t, t, t, t}
	}
	return []any{t}
}

// The migrator's statements. MySQL commits before and after every DDL
// statement, so a migration is not one transaction as on PostgreSQL: the
// migrator serializes runs with a named lock (GET_LOCK, held by its
// session) instead of a transaction's, and the migrations are written to
// be applied again after a failure part way.

// MySQLMigrateLock takes the migrator's lock of table $1, waiting up to $2
// seconds; it returns 1 once taken, 0 on timeout. GET_LOCK's names are the
// server's, not the database's: the name holds the database, so migrators
// of equally named tables in two databases do not wait on each other, and
// it is hashed to fit GET_LOCK's 64 characters.
const MySQLMigrateLock = `SELECT GET_LOCK(CONCAT('txoutbox.migrate.', MD5(CONCAT(DATABASE(), '.', ?))), ?)`

// MySQLMigrateUnlock releases MySQLMigrateLock's lock of table $1.
const MySQLMigrateUnlock = `SELECT RELEASE_LOCK(CONCAT('txoutbox.migrate.', MD5(CONCAT(DATABASE(), '.', ?))))`

// MySQLMigrateLockArgs binds MySQLMigrateLock (and MySQLMigrateUnlock,
// with Table alone).
type MySQLMigrateLockArgs struct {
	Table   string        // the set's table, unquoted
	Timeout time.Duration // whole seconds, at least 1
}

// Args returns MySQLMigrateLock's parameters in order.
func (a MySQLMigrateLockArgs) Args() []any {
	return []any{a.Table, max(1, int64(a.Timeout/time.Second))}
}

// MySQLVersionTable creates a set's version table ({{versions}}).
const MySQLVersionTable = "CREATE TABLE IF NOT EXISTS {{versions}} (version INT NOT NULL PRIMARY KEY, name VARCHAR(255) NOT NULL, " +
	"applied_at DATETIME(6) NOT NULL) ENGINE = InnoDB"

// MySQLVersionsRead reads the applied versions: version, name, applied_at
// (a MySQLTime).
const MySQLVersionsRead = `SELECT version, name, applied_at FROM {{versions}}`

// MySQLVersionRecord records version $1 named $2 as applied now.
const MySQLVersionRecord = `INSERT INTO {{versions}} (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(6))`

// MySQLVersionForget removes version $1's record.
const MySQLVersionForget = `DELETE FROM {{versions}} WHERE version = ?`

// MySQLStatements is every statement above and in mysql_relay.go,
// mysql_members.go, mysql_ops.go and mysql_grants.go, rendered for the default table, with
// inserts of one and of three rows and the relay's lists at small lengths:
// what the grammar test (internal/mysqlgrammar) parses. A statement added
// to any of the files must be added here (or to mysqlRelayStatements,
// mysqlMemberStatements, mysqlOpsStatements or mysqlGrantStatements).
func MySQLStatements() map[string]string {
	n, _ := MySQLNamesFor("", "")
	inbox, _ := MySQLNamesFor("", "inbox")
	out := map[string]string{
		"MySQLInsert(1)":     MySQLInsert(n, 1),
		"MySQLInsert(3)":     MySQLInsert(n, 3),
		"MySQLInboxClaim":    inbox.Render(MySQLInboxClaim),
		"MySQLInboxPrune":    inbox.Render(MySQLInboxPrune),
		"MySQLTestEvents":    n.Render(MySQLTestEvents),
		"MySQLTestDrainable": n.Render(MySQLTestDrainable),
		"MySQLTestAdvance":   n.Render(MySQLTestAdvance),
		"MySQLMigrateLock":   MySQLMigrateLock,
		"MySQLMigrateUnlock": MySQLMigrateUnlock,
		"MySQLVersionTable":  n.Render(MySQLVersionTable),
		"MySQLVersionsRead":  n.Render(MySQLVersionsRead),
		"MySQLVersionRecord": n.Render(MySQLVersionRecord),
		"MySQLVersionForget": n.Render(MySQLVersionForget),
		"DialectProbe":       DialectProbe,
	}
	for name, stmt := range mysqlRelayStatements(n) {
		out[name] = stmt
	}
	for name, stmt := range mysqlOpsStatements(n) {
		out[name] = stmt
	}
	for name, stmt := range mysqlMemberStatements(n) {
		out[name] = stmt
	}
	for name, stmt := range mysqlGrantStatements() {
		out[name] = stmt
	}
	return out
}

// SplitStatements splits a migration script into its statements: each
// ends with a semicolon at the end of a line. Lines that are only a "--"
// comment are dropped. MySQL's drivers run one statement per call unless a
// DSN enables multiStatements, which the migrator does not ask of users.
// The scripts it splits are this repository's, with no semicolon ending a
// line inside a string.
func SplitStatements(script string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(script, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			s := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";")
			out = append(out, s)
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// MySQLTime scans a DATETIME column into Time whether the driver returns
// a time.Time (parseTime=true) or text; text is read as UTC, the zone
// every time is written in. A NULL leaves Time zero and Valid false.
type MySQLTime struct {
	Time  time.Time
	Valid bool
}

// Scan implements sql.Scanner.
func (t *MySQLTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*t = MySQLTime{}
		return nil
	case time.Time:
		*t = MySQLTime{Time: v, Valid: true}
		return nil
	case []byte:
		return t.parse(string(v))
	case string:
		return t.parse(v)
	}
	return fmt.Errorf("outboxsql: cannot scan %T into a time", src)
}

func (t *MySQLTime) parse(s string) error {
	v, err := time.ParseInLocation("2006-01-02 15:04:05.999999999", s, time.UTC)
	if err != nil {
		return fmt.Errorf("outboxsql: parse DATETIME %q: %w", s, err)
	}
	*t = MySQLTime{Time: v, Valid: true}
	return nil
}

// Value implements driver.Valuer, so a MySQLTime can be bound too.
func (t MySQLTime) Value() (driver.Value, error) {
	if !t.Valid {
		return nil, nil
	}
	return t.Time.UTC(), nil
}
