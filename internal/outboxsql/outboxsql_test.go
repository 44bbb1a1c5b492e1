package outboxsql

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestShardMaskSetsBitNFromTheLeft(t *testing.T) {
	got := ShardMask([]int16{0, 2, 255, 256, -1})
	want := "101" + strings.Repeat("0", Shards-4) + "1"
	if got != want {
		t.Fatalf("ShardMask = %s, want %s", got, want)
	}
	if got := ShardMask(nil); got != strings.Repeat("0", Shards) {
		t.Fatalf("ShardMask(nil) = %s", got)
	}
}

func TestWALCreatePublicationListsTheColumnsWhenAsked(t *testing.T) {
	n, err := NamesFor("s", "events")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := WALCreatePublication(n, "p", false), `CREATE PUBLICATION "p" FOR TABLE "s"."events" WITH (publish = 'insert', publish_via_partition_root = true)`; got != want {
		t.Errorf("without a column list:\n got %s\nwant %s", got, want)
	}
	want := `CREATE PUBLICATION "p" FOR TABLE "s"."events" (` + WALColumns + `) WITH (publish = 'insert', publish_via_partition_root = true)`
	if got := WALCreatePublication(n, "p", true); got != want {
		t.Errorf("with a column list:\n got %s\nwant %s", got, want)
	}
}

// The default names of the WAL relay's slot and publication are slot
// names (lower-case letters, digits, underscores, at most 63 bytes)
// whatever the names they are made of, and differ wherever those do: the
// database, or names that read alike once lower-cased, cut or stripped
// (which the names before the database was in them did not).
func TestWALNameIsAUniqueSlotNameOfAnyNames(t *testing.T) {
	long := strings.Repeat("x", 63)
	triples := [][3]string{
		{"orders", "public", "outbox"},
		{"billing", "public", "outbox"}, // another database, same table
		{"orders", "a_b", "c"},
		{"orders", "a", "b_c"}, // "txoutbox_a_b_c" both, before
		{"orders", "Foo", "outbox"},
		{"orders", "foo", "outbox"}, // case
		{"orders", "sch ema", "outbox"},
		{"orders", "sch-ema", "outbox"},
		{"orders", `sch"ema`, "outbox"},
		{"orders", "schéma", "outbox"},
		{"orders", "schèma", "outbox"},
		{"orders", "日本", "outbox"},
		{long, long, long},
		{long, long, long[:62] + "y"}, // differ past the readable part
		{"", "", ""},
	}
	seen := map[string][3]string{}
	for _, tr := range triples {
		n := WALName(tr[0], tr[1], tr[2])
		if len(n) > 63 || !strings.HasPrefix(n, "txoutbox_") {
			t.Errorf("WALName%q = %q: want txoutbox_..., at most 63 bytes", tr, n)
		}
		for _, r := range n {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
				t.Errorf("WALName%q = %q: %q is not in a slot name's alphabet", tr, n, r)
			}
		}
		if prev, ok := seen[n]; ok {
			t.Errorf("WALName%q = WALName%q = %q", tr, prev, n)
		}
		seen[n] = tr
	}
	if got, want := WALName("orders", "public", "outbox"), "txoutbox_orders_public_outbox_"; !strings.HasPrefix(got, want) || len(got) != len(want)+12 {
		t.Errorf("WALName = %q, want %s and 12 hex digits", got, want)
	}
	if WALName("orders", "public", "") != WALName("orders", "public", TableNameDefault) {
		t.Error("an empty table name is not the default table's")
	}
}

// A schema may be any name PostgreSQL allows: NamesFor quotes it in every
// name and keeps it whole in the channel, and statements take the table
// as a literal where they need its name as text. A table's name stays
// plain: the names of its companions are derived from it.
func TestNamesForAnySchema(t *testing.T) {
	t.Parallel()
	n, err := NamesFor(`x"; drop table y; --`, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := `"x""; drop table y; --"."outbox"`; n.Table != want {
		t.Errorf("Table = %s, want %s", n.Table, want)
	}
	if want := `"x""; drop table y; --"."outbox_relays"`; n.Relays != want {
		t.Errorf("Relays = %s, want %s", n.Relays, want)
	}
	if want := `txoutbox.x"; drop table y; --.outbox`; n.Channel != want {
		t.Errorf("Channel = %s, want %s", n.Channel, want)
	}
	if got, want := n.Render(`{{tableliteral}}::regclass {{channel}}`), `'"x""; drop table y; --"."outbox"'::regclass 'txoutbox.x"; drop table y; --.outbox'`; got != want {
		t.Errorf("Render = %s, want %s", got, want)
	}
	q, err := NamesFor(`it's`, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := q.Render(`{{tableliteral}}`), `'"it''s"."outbox"'`; got != want {
		t.Errorf("Render of a quote = %s, want %s", got, want)
	}
	for _, schema := range []string{"tenant_sp ace", `tenant_q"x`, "tenant_ü", "a.b", "1a", strings.Repeat("ü", 31)} {
		if _, err := NamesFor(schema, ""); err != nil {
			t.Errorf("NamesFor(%q): %v", schema, err)
		}
	}
	for _, tc := range []struct{ schema, name string }{
		{strings.Repeat("a", 64), ""}, {"nul\x00", ""}, {"", "x; drop table y"}, {"s", `a"b`}, {"s", "tenant_ü"},
	} {
		if _, err := NamesFor(tc.schema, tc.name); !errors.Is(err, ErrInvalidTable) {
			t.Errorf("NamesFor(%q, %q) = %v, want ErrInvalidTable", tc.schema, tc.name, err)
		}
	}
	// Statements name the table through Render only: none quotes a
	// placeholder itself, which a quote in a name would end.
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(f, "_test.go") && strings.Contains(string(src), "'{{") {
			t.Errorf("%s quotes a placeholder ('{{...}}'): use {{tableliteral}}", f)
		}
	}
}
