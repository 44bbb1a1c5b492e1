package txoutbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/propagation"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/walmsg"
)

// maxRowsPerStatement keeps one insert under PostgreSQL's 65,535 bind
// parameter limit. Up to this many events are written in one round trip.
const maxRowsPerStatement = 5000

// SQLExecer is what the Writer needs of a database/sql transaction: *sql.Tx,
// and the transaction types of GORM and ent, have it.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// PgxExecer is what Pgx needs of a pgx transaction (pgx.Tx): its Exec,
// whose T is pgconn.CommandTag. The type parameter keeps pgx out of this
// module, so a MySQL user's module graph has none of it.
type PgxExecer[T CommandTag] interface {
	Exec(ctx context.Context, sql string, args ...any) (T, error)
}

// CommandTag is what Pgx needs of pgx's pgconn.CommandTag.
type CommandTag interface {
	RowsAffected() int64
}

// Pgx adapts a pgx transaction (pgx.Tx) for Writer.Write and for package
// inbox: w.Write(ctx, txoutbox.Pgx(tx), events...). T is inferred from tx.
func Pgx[T CommandTag](tx PgxExecer[T]) SQLExecer { return pgxExecer[T]{tx} }

type pgxExecer[T CommandTag] struct{ tx PgxExecer[T] }

func (p pgxExecer[T]) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if p.tx == nil {
		return nil, errors.New("txoutbox: pgx: the pgx.Tx is nil")
	}
	tag, err := p.tx.Exec(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgxResult(tag.RowsAffected()), nil
}

// pgxResult is a command tag's row count as a sql.Result.
type pgxResult int64

func (r pgxResult) RowsAffected() (int64, error) { return int64(r), nil }

func (pgxResult) LastInsertId() (int64, error) {
	return 0, errors.New("txoutbox: pgx: LastInsertId is not supported by PostgreSQL")
}

// WriterConfig configures a Writer. The zero value is valid.
type WriterConfig struct {
	// Table is the outbox table. Default: "outbox" on the search_path.
	Table Table

	// Dialect is the database the outbox lives in. Default: PostgreSQL.
	// On MySQL the writer sends MySQL's insert, and NOTIFY and
	// WALMessages do not exist (WALMessages is refused); DialectOf tells
	// it from a *sql.DB.
	Dialect Dialect

	// MaxPayloadBytes rejects larger events at write time: payload plus
	// aggregate id, type, aggregate type and headers. Default:
	// MaxPayloadBytesDefault (1 MiB less 8 KiB for the relay's metadata).
	// Keep it 8 KiB below what the broker accepts, so an oversize event
	// fails the business transaction instead of going dead in the relay.
	MaxPayloadBytes int

	// DisableNotify turns off the NOTIFY that wakes relays as soon as a
	// transaction with events commits. Relays then find new events by
	// polling. NOTIFY is sent in the insert statement itself (no extra
	// round trip) but takes a short global lock at commit; turn it off if
	// that shows up under very high write concurrency, or if the
	// connection goes through a pooler that drops notifications.
	DisableNotify bool

	// NotifyInterval debounces NOTIFY: a Writer sends at most one per
	// interval, in the first write after it. Writes in between rely on the
	// relay, which keeps polling for 100ms after every wake-up, 10ms apart
	// while its polls find rows (see package relay). Under a steady stream
	// of writes this removes nearly all of NOTIFY's cost from the write
	// path. Default: NotifyIntervalDefault (50ms). Negative sends a NOTIFY
	// with every write.
	NotifyInterval time.Duration

	// WALMessages records events in the write-ahead log only, with
	// pg_logical_emit_message(true, ...), instead of inserting rows: no
	// row is written, updated or deleted per event, and only the WAL relay
	// (relay/walrelay) publishes them; the polling relay never sees them.
	// The messages are transactional: they commit or roll back with the
	// caller's transaction, and the WAL relay publishes them in commit
	// order among the rows. The trade-off: such an event exists nowhere
	// but in the WAL the slot holds. If the slot is lost (wal_status lost,
	// max_slot_wal_keep_size) or dropped before it confirmed the event,
	// nothing is left to publish again, `outbox wal takeover` cannot hand
	// it to the polling relay, and `outbox replay` cannot find it.
	// Requires wal_level = logical and a WAL relay's slot for the table
	// (made by the relay's first start): without them Write emits
	// nothing and returns an error matching ErrNoWALSlot.
	WALMessages bool

	// Propagator captures the trace context of the ctx passed to Write
	// into each event's headers, so the relay's publish span can link to
	// the span that wrote the event. It injects only when ctx carries a
	// valid span, and never into an event that already has one of the
	// propagator's headers. Default: the global propagator
	// (otel.SetTextMapPropagator) once the application set one, W3C trace
	// context (traceparent, tracestate) until then. To capture nothing,
	// set an empty propagation.NewCompositeTextMapPropagator().
	Propagator propagation.TextMapPropagator
}

// NotifyIntervalDefault is WriterConfig.NotifyInterval's default.
const NotifyIntervalDefault = 50 * time.Millisecond

// Writer inserts events into the outbox on the caller's transaction. It is
// safe for concurrent use; build one per outbox table and share it.
type Writer struct {
	names          outboxsql.Names
	maxPayload     int
	notify         bool
	notifyInterval time.Duration
	lastNotify     atomic.Int64 // unix nanoseconds of the last write that sent NOTIFY
	insertOne      string       // the statement for one event, rendered once
	insertOneQuiet string       // the same without NOTIFY
	propagator     propagation.TextMapPropagator
	walMessages    bool // WALMessages: emit instead of insert
	dialect        outboxsql.Dialect
}

// NewWriter validates cfg and returns a Writer.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	dialect, err := cfg.Dialect.internal()
	if err != nil {
		return nil, fmt.Errorf("txoutbox: WriterConfig.Dialect: %w", err)
	}
	if dialect == outboxsql.MySQL && cfg.WALMessages {
		return nil, errors.New("txoutbox: WriterConfig.WALMessages needs PostgreSQL's write-ahead log; MySQL has none")
	}
	names, err := outboxsql.NamesForDialect(dialect, cfg.Table.Schema, cfg.Table.Name)
	if err != nil {
		return nil, err
	}
	if cfg.MaxPayloadBytes < 0 {
		return nil, fmt.Errorf("txoutbox: WriterConfig.MaxPayloadBytes is negative (%d)", cfg.MaxPayloadBytes)
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = MaxPayloadBytesDefault
	}
	if cfg.NotifyInterval == 0 {
		cfg.NotifyInterval = NotifyIntervalDefault
	}
	w := &Writer{names: names, maxPayload: cfg.MaxPayloadBytes, notify: !cfg.DisableNotify,
		notifyInterval: cfg.NotifyInterval, propagator: cfg.Propagator}
	w.walMessages = cfg.WALMessages
	w.dialect = dialect
	if dialect == outboxsql.MySQL {
		w.notify = false // no NOTIFY: relays poll
		w.insertOne = outboxsql.MySQLInsert(names, 1)
		w.insertOneQuiet = w.insertOne
		return w, nil
	}
	w.insertOne = outboxsql.Insert(names, 1, w.notify)
	w.insertOneQuiet = outboxsql.Insert(names, 1, false)
	return w, nil
}

// Write validates events and inserts them on tx, the caller's transaction,
// in one statement (one round trip) per 5,000 events. The events commit or
// roll back with tx.
//
// Events with a zero ID or CreatedAt get a new UUIDv7 and the current time;
// Write sets them in the slice passed, so a caller that passes a slice
// (events...) can read them back.
//
// The trace context of ctx, if it carries a span, is stored in each event's
// headers (see WriterConfig.Propagator); the events' Headers maps are not
// modified.
//
// If any event is invalid, Write returns an error matching ErrInvalidEvent
// and writes nothing; the transaction stays usable and its fate is the
// caller's. So does an event with a NotBefore more than MaxNotBeforeSkew
// ahead of the writer's clock on a Writer with WALMessages
// (ErrNotBeforeStreamed). On a table the WAL relay streams, the database
// refuses an event with a NotBefore more than MaxNotBeforeSkew ahead of
// its statement's clock (ErrNotBeforeStreamed too), which aborts the
// transaction like any database error. A NotBefore already past, by the
// statement's clock however long the transaction has been open, is due at
// once in every mode. A database error is returned wrapped; PostgreSQL
// then aborts the transaction, which the caller must roll back.
//
// tx must be a transaction. Write cannot tell a transaction from a pool
// (*sql.DB has ExecContext too); on a pool the events would commit on their
// own, which defeats the outbox.
func (w *Writer) Write(ctx context.Context, tx SQLExecer, events ...Event) error {
	return w.write(ctx, events, func(query string, args []any) (int64, error) {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return -1, nil // the driver does not count rows
		}
		return n, nil
	})
}

// write writes events through exec, which returns the rows the statement
// returned or changed (-1 when the driver does not say).
func (w *Writer) write(ctx context.Context, events []Event, exec func(string, []any) (int64, error)) error {
	if len(events) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("txoutbox: write events: %w", err)
	}
	now := time.Now()
	for i := range events {
		if err := events[i].validate(i, w.maxPayload, now); err != nil {
			return err
		}
		if w.walMessages && events[i].NotBefore.After(now.Add(MaxNotBeforeSkew)) {
			return fmt.Errorf("%w: event %d (%s) has NotBefore %s, %s ahead of the writer's clock, and WALMessages events are published at commit",
				ErrNotBeforeStreamed, i, events[i].Type, events[i].NotBefore.Format(time.RFC3339), events[i].NotBefore.Sub(now).Round(time.Millisecond))
		}
	}
	for i := range events {
		e := &events[i]
		if e.ID == uuid.Nil {
			id, err := uuid.NewV7()
			if err != nil {
				return fmt.Errorf("txoutbox: generate event id: %w", err)
			}
			e.ID = id
		}
		if e.CreatedAt.IsZero() {
			e.CreatedAt = now
		}
	}
	traced := traceHeaders(ctx, w.propagator)
	if w.dialect == outboxsql.MySQL {
		return w.writeMySQL(events, traced, exec)
	}
	notify := !w.walMessages && w.shouldNotify(now)
	for start := 0; start < len(events); start += maxRowsPerStatement {
		chunk := events[start:min(start+maxRowsPerStatement, len(events))]
		if w.walMessages {
			args, err := emitArgs(w.names.Table, chunk, traced)
			if err != nil {
				return err
			}
			n, err := exec(outboxsql.WALEmit(len(chunk)), args)
			if err != nil {
				return fmt.Errorf("txoutbox: emit %d events for %s: %w", len(chunk), w.names.Table, err)
			}
			if n == 0 {
				return fmt.Errorf("%w: %s", ErrNoWALSlot, w.names.Table)
			}
			continue
		}
		query := w.insertOneQuiet
		switch {
		case len(chunk) > 1:
			query = outboxsql.Insert(w.names, len(chunk), notify && start == 0)
		case notify && start == 0:
			query = w.insertOne
		}
		args, err := insertArgs(chunk, traced)
		if err != nil {
			return err
		}
		if _, err := exec(query, args); err != nil {
			if outboxsql.SQLState(err) == outboxsql.NotBeforeStreamedCode {
				return fmt.Errorf("%w: %s: %s", ErrNotBeforeStreamed, w.names.Table, serverMessage(err))
			}
			if outboxsql.MySQLErrorNumber(err) == mysqlSyntaxError {
				return fmt.Errorf("txoutbox: insert %d events into %s: %w (the Writer sends PostgreSQL's SQL and the database is MySQL: set WriterConfig.Dialect to txoutbox.MySQL)",
					len(chunk), w.names.Table, err)
			}
			return fmt.Errorf("txoutbox: insert %d events into %s: %w", len(chunk), w.names.Table, err)
		}
	}
	return nil
}

// mysqlSyntaxError is MySQL's and MariaDB's ER_PARSE_ERROR.
const mysqlSyntaxError = 1064

// serverMessage is the server's message in err without the driver's
// decoration: pgconn.PgError's Message field, read through its
// interface-free error text "ERROR: message (SQLSTATE code)".
func serverMessage(err error) string {
	var e interface{ SQLState() string }
	if !errors.As(err, &e) {
		return err.Error()
	}
	msg := e.(error).Error()
	msg = strings.TrimPrefix(msg, "ERROR: ")
	if i := strings.LastIndex(msg, " (SQLSTATE "); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// mysqlMaxStatementBytes bounds the payload and headers of one MySQL insert,
// so a batch of large events stays within the server's max_allowed_packet
// (16 MiB by default on MariaDB, 64 MiB on MySQL); one event larger than it
// goes alone.
const mysqlMaxStatementBytes = 8 << 20

// writeMySQL inserts events on MySQL, in statements of at most
// MySQLMaxRowsPerStatement rows and about mysqlMaxStatementBytes.
func (w *Writer) writeMySQL(events []Event, traced propagation.MapCarrier, exec func(string, []any) (int64, error)) error {
	args := make([]any, 0, min(len(events), outboxsql.MySQLMaxRowsPerStatement)*outboxsql.MySQLInsertParamsPerRow)
	rows, size := 0, 0
	flush := func() error {
		if rows == 0 {
			return nil
		}
		query := w.insertOne
		if rows > 1 {
			query = outboxsql.MySQLInsert(w.names, rows)
		}
		if _, err := exec(query, args); err != nil {
			return fmt.Errorf("txoutbox: insert %d events into %s: %w", rows, w.names.Table, err)
		}
		args, rows, size = args[:0], 0, 0
		return nil
	}
	for i := range events {
		e := &events[i]
		headers, err := encodeHeaders(e.Headers, traced)
		if err != nil {
			return err
		}
		n := len(e.Payload) + len(headers)
		if rows == outboxsql.MySQLMaxRowsPerStatement || rows > 0 && size+n > mysqlMaxStatementBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		payload := e.Payload
		if payload == nil {
			payload = []byte{}
		}
		args = outboxsql.MySQLInsertRow{EventID: e.ID.String(), Topic: e.Topic, AggregateType: e.AggregateType,
			AggregateID: e.AggregateID, EventType: e.Type, ContentType: e.contentType(), Payload: payload,
			Headers: headers, CreatedAt: e.CreatedAt, NotBefore: e.NotBefore}.AppendArgs(args)
		rows++
		size += n
	}
	return flush()
}

// shouldNotify reports whether this write sends NOTIFY: the first write
// after NotifyInterval has passed since the last one that did.
func (w *Writer) shouldNotify(now time.Time) bool {
	if !w.notify {
		return false
	}
	if w.notifyInterval < 0 {
		return true
	}
	last := w.lastNotify.Load()
	return now.UnixNano()-last >= int64(w.notifyInterval) && w.lastNotify.CompareAndSwap(last, now.UnixNano())
}

func insertArgs(events []Event, traced propagation.MapCarrier) ([]any, error) {
	args := make([]any, 0, len(events)*outboxsql.InsertParamsPerRow)
	for i := range events {
		e := &events[i]
		headers, err := encodeHeaders(e.Headers, traced)
		if err != nil {
			return nil, err
		}
		payload := e.Payload
		if payload == nil {
			payload = []byte{} // the column is NOT NULL; an empty body is allowed for non-JSON types
		}
		var notBefore any // NULL: at once
		if !e.NotBefore.IsZero() {
			notBefore = e.NotBefore
		}
		args = append(args, e.ID.String(), e.Topic, e.AggregateType, e.AggregateID, e.Type,
			e.contentType(), payload, headers, e.CreatedAt, notBefore)
	}
	return args, nil
}

// emitArgs binds outboxsql.WALEmit: the table, then each event encoded.
func emitArgs(table string, events []Event, traced propagation.MapCarrier) ([]any, error) {
	args := make([]any, 0, len(events)+1)
	args = append(args, table)
	for i := range events {
		e := &events[i]
		headers, err := encodeHeaders(e.Headers, traced)
		if err != nil {
			return nil, err
		}
		b, err := walmsg.Encode(walmsg.Event{ID: e.ID.String(), Topic: e.Topic, AggregateType: e.AggregateType,
			AggregateID: e.AggregateID, Type: e.Type, ContentType: e.contentType(), Payload: e.Payload,
			Headers: json.RawMessage(headers), CreatedAt: e.CreatedAt.Truncate(time.Microsecond)})
		if err != nil {
			return nil, fmt.Errorf("txoutbox: encode event %s: %w", e.ID, err)
		}
		args = append(args, b)
	}
	return args, nil
}
