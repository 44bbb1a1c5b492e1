package outboxsql

import (
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
