package walrelay

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txoutbox/txoutbox"
)

// scanBinary must decode every value exactly as pgtype does, which it
// replaces on the relay's hot path.
func TestScanBinaryMatchesPgtype(t *testing.T) {
	m := pgtype.NewMap()
	encode := func(oid uint32, v any) []byte {
		t.Helper()
		b, err := m.Encode(oid, pgtype.BinaryFormatCode, v, nil)
		if err != nil {
			t.Fatalf("encode %v as %d: %v", v, oid, err)
		}
		if b == nil {
			b = []byte{} // empty, not NULL, as pglogrepl hands an empty value over
		}
		return b
	}
	for _, v := range []int64{0, 1, -1, math.MaxInt64, math.MinInt64, 1 << 40} {
		b := encode(pgtype.Int8OID, v)
		var fast, slow int64
		if !scanBinary(pgtype.Int8OID, b, &fast) || m.Scan(pgtype.Int8OID, pgtype.BinaryFormatCode, b, &slow) != nil || fast != slow || fast != v {
			t.Fatalf("int8 %d: fast %d, pgtype %d", v, fast, slow)
		}
	}
	for _, oid := range []uint32{pgtype.TextOID, pgtype.VarcharOID} {
		for _, v := range []string{"", "orders", "ünïcødé 🙂"} {
			b := encode(oid, v)
			var fast, slow string
			if !scanBinary(oid, b, &fast) || m.Scan(oid, pgtype.BinaryFormatCode, b, &slow) != nil || fast != slow || fast != v {
				t.Fatalf("text %q: fast %q, pgtype %q", v, fast, slow)
			}
		}
	}
	for _, v := range [][]byte{{}, []byte(`{"a":1}`), {0, 1, 2, 255}} {
		b := encode(pgtype.ByteaOID, v)
		var fast, slow []byte
		if !scanBinary(pgtype.ByteaOID, b, &fast) || m.Scan(pgtype.ByteaOID, pgtype.BinaryFormatCode, b, &slow) != nil ||
			!bytes.Equal(fast, slow) || (fast == nil) != (slow == nil) {
			t.Fatalf("bytea %v: fast %v, pgtype %v", v, fast, slow)
		}
		if len(b) > 0 { // the decoded value must not share the message's buffer
			b[0]++
			if fast[0] == b[0] {
				t.Fatalf("bytea %v aliases the buffer", v)
			}
		}
	}
	for _, v := range []string{`{}`, `{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`} {
		b := encode(pgtype.JSONBOID, v)
		var fast, slow []byte
		if !scanBinary(pgtype.JSONBOID, b, &fast) || m.Scan(pgtype.JSONBOID, pgtype.BinaryFormatCode, b, &slow) != nil || !bytes.Equal(fast, slow) {
			t.Fatalf("jsonb %s: fast %s, pgtype %s", v, fast, slow)
		}
	}
	id := uuid.New()
	b := encode(pgtype.UUIDOID, id)
	var fastID, slowID uuid.UUID
	if !scanBinary(pgtype.UUIDOID, b, &fastID) || m.Scan(pgtype.UUIDOID, pgtype.BinaryFormatCode, b, &slowID) != nil || fastID != slowID || fastID != id {
		t.Fatalf("uuid %s: fast %s, pgtype %s", id, fastID, slowID)
	}
	for _, v := range []time.Time{
		time.Date(2026, 11, 30, 16, 0, 0, 123456000, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC), // before PostgreSQL's epoch
		time.Date(1960, 1, 1, 0, 0, 0, 1000, time.UTC),
		time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		b := encode(pgtype.TimestamptzOID, v)
		var fast, slow time.Time
		if !scanBinary(pgtype.TimestamptzOID, b, &fast) || m.Scan(pgtype.TimestamptzOID, pgtype.BinaryFormatCode, b, &slow) != nil ||
			!fast.Equal(slow) || !fast.Equal(v) || fast.Location() != slow.Location() {
			t.Fatalf("timestamptz %s: fast %s, pgtype %s", v, fast, slow)
		}
	}
	// Infinity, other types and other targets are left to pgtype.
	inf := encode(pgtype.TimestamptzOID, pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true})
	var ts time.Time
	var s string
	var n int32
	if scanBinary(pgtype.TimestamptzOID, inf, &ts) || scanBinary(pgtype.Int4OID, encode(pgtype.Int4OID, int32(1)), &n) ||
		scanBinary(pgtype.JSONOID, encode(pgtype.JSONOID, `{}`), &s) {
		t.Fatal("scanBinary decoded a value it should leave to pgtype")
	}
}

// parseInsert must read an Insert exactly as pglogrepl does, which it
// replaces on the relay's hot path, and refuse a message cut short or
// padded with an error rather than a panic.
func TestParseInsertMatchesPglogrepl(t *testing.T) {
	msg := []byte{'I', 0, 0, 0x40, 0x01, 'N', 0, 4}
	col := func(kind byte, v []byte) {
		msg = append(msg, kind)
		if kind == pglogrepl.TupleDataTypeText || kind == pglogrepl.TupleDataTypeBinary {
			msg = binary.BigEndian.AppendUint32(msg, uint32(len(v)))
			msg = append(msg, v...)
		}
	}
	col(pglogrepl.TupleDataTypeText, []byte("orders"))
	col(pglogrepl.TupleDataTypeBinary, []byte{0, 1, 2, 255})
	col(pglogrepl.TupleDataTypeNull, nil)
	col(pglogrepl.TupleDataTypeToast, nil)

	want, err := pglogrepl.Parse(msg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	w, g := want.(*pglogrepl.InsertMessage), got.(*insertMessage)
	if g.relation != w.RelationID || len(g.cols) != len(w.Tuple.Columns) {
		t.Fatalf("relation %d with %d columns, pglogrepl %d with %d", g.relation, len(g.cols), w.RelationID, len(w.Tuple.Columns))
	}
	for i, c := range w.Tuple.Columns {
		if g.cols[i].kind != c.DataType || !bytes.Equal(g.cols[i].data, c.Data) {
			t.Fatalf("column %d: %q %v, pglogrepl %q %v", i, g.cols[i].kind, g.cols[i].data, c.DataType, c.Data)
		}
	}
	for n := 1; n < len(msg); n++ {
		if _, err := parseMessage(msg[:n]); err == nil {
			t.Fatalf("a message cut to %d of %d bytes parsed", n, len(msg))
		}
	}
	if _, err := parseMessage(append(msg[:len(msg):len(msg)], 0)); err == nil {
		t.Fatal("a message with a byte after its last column parsed")
	}
	bad := append([]byte{}, msg...)
	bad[8] = 'x' // the first column's kind
	if _, err := parseMessage(bad); err == nil {
		t.Fatal("a column of an unknown kind parsed")
	}
}

// The decoder finds the outbox columns by name wherever the relation puts
// them, among columns of its own, and keeps one string of each topic and
// type, up to maxInterned of them.
func TestDecoderReadsColumnsByName(t *testing.T) {
	types := pgtype.NewMap()
	id, created := uuid.New(), time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	type column struct {
		name string
		oid  uint32
		v    any
	}
	columns := []column{{"headers", pgtype.JSONBOID, `{"k":"v"}`}, {"extra", pgtype.Int4OID, int32(7)}, {"id", pgtype.Int8OID, int64(42)},
		{"payload", pgtype.ByteaOID, []byte(`{"n":1}`)}, {"topic", pgtype.TextOID, "orders"}, {"event_id", pgtype.UUIDOID, id},
		{"aggregate_type", pgtype.TextOID, "order"}, {"aggregate_id", pgtype.TextOID, "o-1"}, {"event_type", pgtype.TextOID, "order.placed"},
		{"content_type", pgtype.TextOID, "application/json"}, {"created_at", pgtype.TimestamptzOID, created}}
	rel := &pglogrepl.RelationMessage{RelationID: 1, Namespace: "app", RelationName: "outbox"}
	ins := &insertMessage{relation: 1}
	for _, c := range columns {
		b, err := types.Encode(c.oid, pgtype.BinaryFormatCode, c.v, nil)
		if err != nil {
			t.Fatal(err)
		}
		rel.Columns = append(rel.Columns, &pglogrepl.RelationMessageColumn{Name: c.name, DataType: c.oid})
		ins.cols = append(ins.cols, tupleColumn{kind: pglogrepl.TupleDataTypeBinary, data: b})
	}
	d := newDecoder("app", "outbox", "")
	d.relation(rel)
	ev, ok, err := d.insert(ins)
	if err != nil || !ok {
		t.Fatalf("insert: %v, %v", ok, err)
	}
	want := txoutbox.Event{ID: id, Topic: "orders", AggregateType: "order", AggregateID: "o-1", Type: "order.placed",
		ContentType: "application/json", Payload: []byte(`{"n":1}`), Headers: map[string]string{"k": "v"}, CreatedAt: created}
	if !ev.e.CreatedAt.Equal(created) {
		t.Fatalf("created_at %s, want %s", ev.e.CreatedAt, created)
	}
	ev.e.CreatedAt = created // the same instant, in the local time zone
	if ev.row != 42 || !reflect.DeepEqual(ev.e, want) {
		t.Fatalf("decoded row %d %+v, want 42 %+v", ev.row, ev.e, want)
	}
	again, _, _ := d.insert(ins)
	if unsafe.StringData(again.e.Topic) != unsafe.StringData(ev.e.Topic) || unsafe.StringData(again.e.Type) != unsafe.StringData(ev.e.Type) {
		t.Error("the same topic and type decoded into new strings")
	}
	for i := range maxInterned + 10 {
		d.intern([]byte(fmt.Sprint("topic-", i)))
	}
	if len(d.names) != maxInterned {
		t.Errorf("%d interned strings, want at most %d", len(d.names), maxInterned)
	}

	// Without a topic column, the row cannot become an event.
	rel2 := *rel
	rel2.RelationID, rel2.Columns = 2, slices.Clone(rel.Columns)
	rel2.Columns[4] = &pglogrepl.RelationMessageColumn{Name: "subject", DataType: pgtype.TextOID}
	d.relation(&rel2)
	ins.relation = 2
	_, _, err = d.insert(ins)
	var bad *rowError
	if !errors.As(err, &bad) || bad.row != 42 || !strings.Contains(err.Error(), "column topic") {
		t.Fatalf("insert without a topic column: %v, want a rowError for row 42 naming the column", err)
	}
}

// BenchmarkDecodeInsert reads one outbox row from its pgoutput Insert
// message, as the relay does for every event.
func BenchmarkDecodeInsert(b *testing.B) {
	types := pgtype.NewMap()
	rel := &pglogrepl.RelationMessage{RelationID: 1, Namespace: "app", RelationName: "outbox"}
	msg := []byte{'I', 0, 0, 0, 1, 'N', 0, 0}
	add := func(name string, oid uint32, v any) {
		rel.Columns = append(rel.Columns, &pglogrepl.RelationMessageColumn{Name: name, DataType: oid})
		if v == nil {
			msg = append(msg, pglogrepl.TupleDataTypeNull)
			return
		}
		val, err := types.Encode(oid, pgtype.BinaryFormatCode, v, nil)
		if err != nil {
			b.Fatal(err)
		}
		msg = append(msg, pglogrepl.TupleDataTypeBinary)
		msg = binary.BigEndian.AppendUint32(msg, uint32(len(val)))
		msg = append(msg, val...)
	}
	now := time.Now()
	add("id", pgtype.Int8OID, int64(1))
	add("event_id", pgtype.UUIDOID, uuid.New())
	add("topic", pgtype.TextOID, "orders")
	add("aggregate_type", pgtype.TextOID, "order")
	add("aggregate_id", pgtype.TextOID, "order-00042")
	add("event_type", pgtype.TextOID, "order.placed")
	add("content_type", pgtype.TextOID, "application/json")
	add("payload", pgtype.ByteaOID, bytes.Repeat([]byte("x"), 200))
	add("headers", pgtype.JSONBOID, `{}`)
	add("created_at", pgtype.TimestamptzOID, now)
	add("shard", pgtype.Int2OID, int16(7))
	add("state", pgtype.TextOID, "pending")
	add("attempts", pgtype.Int4OID, int32(0))
	add("next_attempt_at", pgtype.TimestamptzOID, now)
	add("lease_owner", pgtype.TextOID, nil)
	add("lease_expires_at", pgtype.TimestamptzOID, nil)
	add("last_error", pgtype.TextOID, nil)
	add("published_at", pgtype.TimestamptzOID, nil)
	binary.BigEndian.PutUint16(msg[6:], uint16(len(rel.Columns)))
	d := newDecoder("app", "outbox", "")
	d.relation(rel)
	b.ReportAllocs()
	for b.Loop() {
		m, err := parseMessage(bytes.Clone(msg)) // read clones each message
		if err != nil {
			b.Fatal(err)
		}
		if _, ok, err := d.insert(m.(*insertMessage)); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
