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
