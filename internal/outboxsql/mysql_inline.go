package outboxsql

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MySQLInline returns query with each placeholder replaced by its
// argument as an SQL literal, for the relay's claim cycle on MySQL, whose
// statements bind lists of ids. go-sql-driver sends a statement with
// arguments as a server-side prepare, execute and close (unless the DSN
// sets interpolateParams), and the server answers a prepare with a
// definition of every placeholder: a claim binding a thousand ids paid
// milliseconds for that alone. A statement without arguments goes as text,
// in one round trip.
//
// Only values whose literal cannot be anything but data are inlined:
// integers and floats as digits, booleans as 1 or 0, times (UTC) as
// 'YYYY-MM-DD hh:mm:ss.ffffff', byte strings as hexadecimal literals
// (X'…', the column's collation compares them), and strings as
// hexadecimal literals with the utf8mb4 introducer (_utf8mb4 X'…'), whose
// coercibility yields to a column's collation. None depends on sql_mode
// (NO_BACKSLASH_ESCAPES, ANSI_QUOTES). Placeholders inside quotes or
// backticks are left alone; the statements of this package have none.
func MySQLInline(query string, args []any) (string, error) {
	var b strings.Builder
	b.Grow(len(query) + 20*len(args))
	next := 0
	var quote byte
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == '?':
			if next == len(args) {
				return "", fmt.Errorf("outboxsql: inline: more placeholders than %d arguments", len(args))
			}
			if err := appendMySQLLiteral(&b, args[next]); err != nil {
				return "", fmt.Errorf("outboxsql: inline argument %d: %w", next+1, err)
			}
			next++
			continue
		}
		b.WriteByte(c)
	}
	if next != len(args) {
		return "", fmt.Errorf("outboxsql: inline: %d placeholders for %d arguments", next, len(args))
	}
	return b.String(), nil
}

// appendMySQLLiteral writes v as an SQL literal (see MySQLInline).
func appendMySQLLiteral(b *strings.Builder, v any) error {
	var buf [32]byte
	switch v := v.(type) {
	case nil:
		b.WriteString("NULL")
	case int64:
		b.Write(strconv.AppendInt(buf[:0], v, 10))
	case int:
		b.Write(strconv.AppendInt(buf[:0], int64(v), 10))
	case int32:
		b.Write(strconv.AppendInt(buf[:0], int64(v), 10))
	case int16:
		b.Write(strconv.AppendInt(buf[:0], int64(v), 10))
	case float64:
		b.Write(strconv.AppendFloat(buf[:0], v, 'f', -1, 64))
	case bool:
		if v {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	case time.Time:
		b.WriteByte('\'')
		b.Write(v.UTC().AppendFormat(buf[:0], "2006-01-02 15:04:05.000000"))
		b.WriteByte('\'')
	case []byte:
		appendHex(b, "X'", v)
	case string:
		appendHex(b, "_utf8mb4 X'", []byte(v))
	default:
		return fmt.Errorf("cannot inline a %T", v)
	}
	return nil
}

func appendHex(b *strings.Builder, prefix string, v []byte) {
	b.WriteString(prefix)
	b.WriteString(hex.EncodeToString(v))
	b.WriteByte('\'')
}
