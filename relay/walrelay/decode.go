package walrelay

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/walmsg"
)

// event is one event read from the slot or the table: the event, and its
// row id (0 for a table-less event, which has no row).
type event struct {
	row int64
	e   txoutbox.Event
	bad *rowError // a row that cannot be decoded: the lanes mark it dead
}

// decoder turns pgoutput messages into events. It keeps the relations the
// stream described, by relation id, as pgoutput sends each before its
// first row in a session and again after the table changes.
type decoder struct {
	schema, table string // the outbox table; an empty schema matches any
	prefix        string // prefix of table-less event messages
	relations     map[uint32]*relation
	types         *pgtype.Map
	names         map[string]string // interned values of the columns in interned
}

// The outbox columns an event is built from, as indexes of rowColumns.
const (
	colID = iota
	colEventID
	colTopic
	colAggregateType
	colAggregateID
	colEventType
	colContentType
	colPayload
	colHeaders
	colCreatedAt
	numRowColumns
)

// rowColumns names the outbox columns an event is built from.
var rowColumns = [numRowColumns]string{colID: "id", colEventID: "event_id", colTopic: "topic",
	colAggregateType: "aggregate_type", colAggregateID: "aggregate_id", colEventType: "event_type",
	colContentType: "content_type", colPayload: "payload", colHeaders: "headers", colCreatedAt: "created_at"}

// interned marks the columns whose values repeat across events (topics,
// types), which the decoder keeps one string of each instead of
// allocating one per event; at most maxInterned of them.
var interned = [numRowColumns]bool{colTopic: true, colAggregateType: true, colEventType: true, colContentType: true}

// maxInterned bounds the decoder's interned strings: past it, values are
// allocated per event, as any others.
const maxInterned = 1024

// relation is a Relation message with the positions of rowColumns in it
// (-1 for a column it lacks), worked out once per relation rather than
// once per row.
type relation struct {
	*pglogrepl.RelationMessage
	at [numRowColumns]int
}

func newDecoder(schema, table, prefix string) *decoder {
	return &decoder{schema: schema, table: table, prefix: prefix,
		relations: map[uint32]*relation{}, types: pgtype.NewMap(), names: map[string]string{}}
}

// relation records a Relation message.
func (d *decoder) relation(m *pglogrepl.RelationMessage) {
	rel := &relation{RelationMessage: m}
	for k, name := range rowColumns {
		rel.at[k] = -1
		for i, c := range m.Columns {
			if c.Name == name {
				rel.at[k] = i
				break
			}
		}
	}
	d.relations[m.RelationID] = rel
}

// parseMessage reads a pgoutput message: Inserts with parseInsert, the
// rest with pglogrepl. The Insert's values alias data.
func parseMessage(data []byte) (pglogrepl.Message, error) {
	if len(data) > 0 && data[0] == 'I' {
		return parseInsert(data[1:])
	}
	return pglogrepl.Parse(data)
}

// insertMessage is a pgoutput Insert message (protocol version 1), as
// parseInsert reads it: the relation and the new row's columns.
type insertMessage struct {
	relation uint32
	cols     []tupleColumn
}

// Type makes an insertMessage a pglogrepl.Message, so the stream hands it
// over like the others.
func (*insertMessage) Type() pglogrepl.MessageType { return pglogrepl.MessageTypeInsert }

// tupleColumn is one column of a row: its kind (pglogrepl.TupleDataType*)
// and, for a text or binary value, the value, which aliases the message.
type tupleColumn struct {
	kind byte
	data []byte
}

// parseInsert reads a pgoutput Insert message, src without its leading
// 'I'. The relay reads one per event, and pglogrepl's decoder allocates
// two objects per column (about forty per outbox row) and copies each
// value byte by byte. This one allocates the
// column list only; the values alias src, which must not be reused. It
// returns an error for a message cut short, where pglogrepl's would
// panic.
func parseInsert(src []byte) (*insertMessage, error) {
	if len(src) < 7 {
		return nil, fmt.Errorf("insert message of %d bytes, want at least 7", len(src))
	}
	m := &insertMessage{relation: binary.BigEndian.Uint32(src)}
	if src[4] != 'N' {
		return nil, fmt.Errorf("insert message: tuple type %q, want 'N'", src[4])
	}
	n := int(binary.BigEndian.Uint16(src[5:]))
	m.cols = make([]tupleColumn, n)
	p := 7
	for i := range m.cols {
		if p >= len(src) {
			return nil, fmt.Errorf("insert message cut short in column %d of %d", i+1, n)
		}
		c := &m.cols[i]
		c.kind = src[p]
		p++
		switch c.kind {
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			if len(src)-p < 4 {
				return nil, fmt.Errorf("insert message cut short in column %d of %d", i+1, n)
			}
			size := int(binary.BigEndian.Uint32(src[p:]))
			p += 4
			if size < 0 || len(src)-p < size {
				return nil, fmt.Errorf("insert message: column %d of %d holds %d bytes, %d left", i+1, n, size, len(src)-p)
			}
			c.data = src[p : p+size : p+size]
			p += size
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast:
		default:
			return nil, fmt.Errorf("insert message: column %d of %d of kind %q", i+1, n, c.kind)
		}
	}
	if p != len(src) {
		return nil, fmt.Errorf("insert message: %d bytes after the last column", len(src)-p)
	}
	return m, nil
}

// insert decodes an Insert into the outbox table; ok is false for rows of
// other tables the publication may also publish.
func (d *decoder) insert(m *insertMessage) (ev event, ok bool, err error) {
	rel, ok, err := d.outboxRelation(m)
	if !ok || err != nil {
		return event{}, false, err
	}
	ev, err = d.row(rel, m)
	if err != nil {
		err = fmt.Errorf("insert into %s.%s: %w", rel.Namespace, rel.RelationName, err)
		var row int64
		if d.scan(rel, m, colID, &row) == nil {
			return event{}, false, &rowError{row: row, err: err}
		}
		return event{}, false, err
	}
	return ev, true, nil
}

// rowID reads only the id of an Insert into the outbox table; ok is false
// for another table's. Takeover needs no more, so a row the relay could
// not turn into an event (it would go dead) does not stop a takeover.
func (d *decoder) rowID(m *insertMessage) (row int64, ok bool, err error) {
	rel, ok, err := d.outboxRelation(m)
	if !ok || err != nil {
		return 0, false, err
	}
	if err := d.scan(rel, m, colID, &row); err != nil {
		return 0, false, fmt.Errorf("insert into %s.%s: id: %w", rel.Namespace, rel.RelationName, err)
	}
	return row, true, nil
}

// outboxRelation returns the relation m inserts into, with ok false when
// it is not the outbox table.
func (d *decoder) outboxRelation(m *insertMessage) (*relation, bool, error) {
	rel, known := d.relations[m.relation]
	if !known {
		return nil, false, fmt.Errorf("insert into relation %d, which the stream has not described", m.relation)
	}
	if rel.RelationName != d.table || (d.schema != "" && rel.Namespace != d.schema) {
		return nil, false, nil
	}
	if len(m.cols) != len(rel.Columns) {
		return nil, false, fmt.Errorf("insert into %s.%s: tuple does not match the relation's %d columns", rel.Namespace, rel.RelationName, len(rel.Columns))
	}
	return rel, true, nil
}

// scan reads column rowColumns[k] of m into dst.
func (d *decoder) scan(rel *relation, m *insertMessage, k int, dst any) error {
	i := rel.at[k]
	if i < 0 {
		return errors.New("missing or NULL")
	}
	tc, oid := m.cols[i], rel.Columns[i].DataType
	switch tc.kind {
	case pglogrepl.TupleDataTypeBinary:
		if s, ok := dst.(*string); ok && interned[k] && (oid == pgtype.TextOID || oid == pgtype.VarcharOID) {
			*s = d.intern(tc.data)
			return nil
		}
		if scanBinary(oid, tc.data, dst) {
			return nil
		}
		return d.types.Scan(oid, pgtype.BinaryFormatCode, tc.data, dst)
	case pglogrepl.TupleDataTypeText:
		return d.types.Scan(oid, pgtype.TextFormatCode, tc.data, dst)
	case pglogrepl.TupleDataTypeNull:
		return errors.New("missing or NULL")
	default:
		return fmt.Errorf("sent as %q", tc.kind)
	}
}

// intern returns b as a string, the same one for the same bytes while
// fewer than maxInterned are kept.
func (d *decoder) intern(b []byte) string {
	if s, ok := d.names[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	if len(d.names) < maxInterned {
		d.names[s] = s
	}
	return s
}

// rowError is a row the relay cannot turn into an event (headers that are
// not a JSON object of strings, written around the Writer): it goes dead
// with the reason, as with the polling relay, and the stream goes on.
type rowError struct {
	row int64
	err error
}

func (e *rowError) Error() string { return fmt.Sprintf("row %d: %v", e.row, e.err) }
func (e *rowError) Unwrap() error { return e.err }

// row builds an event from the outbox columns of m.
func (d *decoder) row(rel *relation, m *insertMessage) (event, error) {
	var (
		ev      event
		id      uuid.UUID
		headers []byte
		created time.Time
	)
	dsts := [numRowColumns]any{colID: &ev.row, colEventID: &id, colTopic: &ev.e.Topic,
		colAggregateType: &ev.e.AggregateType, colAggregateID: &ev.e.AggregateID, colEventType: &ev.e.Type,
		colContentType: &ev.e.ContentType, colPayload: &ev.e.Payload, colHeaders: &headers, colCreatedAt: &created}
	for k, dst := range dsts {
		if err := d.scan(rel, m, k, dst); err != nil {
			return event{}, fmt.Errorf("column %s: %w", rowColumns[k], err)
		}
	}
	ev.e.ID = id
	ev.e.CreatedAt = created
	if err := d.headers(&ev, headers); err != nil {
		return event{}, err
	}
	return ev, nil
}

// headers decodes the headers column (jsonb) into ev.
func (d *decoder) headers(ev *event, b []byte) error {
	if len(b) == 0 || string(b) == "{}" { // the Writer's default: nothing to decode
		return nil
	}
	if err := json.Unmarshal(b, &ev.e.Headers); err != nil {
		return fmt.Errorf("row %d: headers: %w", ev.row, err)
	}
	return nil
}

// message decodes a logical decoding message; ok is false for messages of
// other prefixes (other applications, other outbox tables).
func (d *decoder) message(m *pglogrepl.LogicalDecodingMessage) (event, bool, error) {
	if m.Prefix != d.prefix {
		return event{}, false, nil
	}
	w, err := walmsg.Decode(m.Content)
	if err != nil {
		return event{}, false, fmt.Errorf("message at %s: %w", m.LSN, err)
	}
	id, err := uuid.Parse(w.ID)
	if err != nil {
		return event{}, false, fmt.Errorf("message at %s: event id: %w", m.LSN, err)
	}
	ev := event{e: txoutbox.Event{ID: id, Topic: w.Topic, AggregateType: w.AggregateType, AggregateID: w.AggregateID,
		Type: w.Type, ContentType: w.ContentType, Payload: w.Payload, CreatedAt: w.CreatedAt}}
	if err := d.headers(&ev, w.Headers); err != nil {
		return event{}, false, fmt.Errorf("message at %s: %w", m.LSN, err)
	}
	return ev, true, nil
}

// microsecondsToY2K is PostgreSQL's timestamp epoch (2000-01-01 UTC) in
// microseconds since the Unix epoch.
const microsecondsToY2K = 946684800 * 1000000

// scanBinary decodes, in the binary format, the types the outbox table's
// columns have into the targets row reads them into, as pgtype would but
// without its per-value plan lookup, which was most of the decoder's cost.
// It reports false for any other type or target, for an infinite
// timestamp, and for a malformed value, all of which pgtype then decodes
// (or refuses with its own error).
func scanBinary(oid uint32, b []byte, dst any) bool {
	switch d := dst.(type) {
	case *int64:
		if oid == pgtype.Int8OID && len(b) == 8 {
			*d = int64(binary.BigEndian.Uint64(b))
			return true
		}
	case *string:
		if oid == pgtype.TextOID || oid == pgtype.VarcharOID {
			*d = string(b)
			return true
		}
	case *[]byte:
		switch {
		case oid == pgtype.ByteaOID:
			*d = append([]byte{}, b...)
			return true
		case oid == pgtype.JSONBOID && len(b) > 0 && b[0] == 1: // version 1, then the JSON text
			*d = append([]byte{}, b[1:]...)
			return true
		}
	case *uuid.UUID:
		if oid == pgtype.UUIDOID && len(b) == 16 {
			copy(d[:], b)
			return true
		}
	case *time.Time:
		if oid == pgtype.TimestamptzOID && len(b) == 8 {
			us := int64(binary.BigEndian.Uint64(b))
			if us == math.MaxInt64 || us == math.MinInt64 { // infinity
				return false
			}
			*d = time.Unix(microsecondsToY2K/1000000+us/1000000, (microsecondsToY2K%1000000*1000)+(us%1000000*1000))
			return true
		}
	}
	return false
}
