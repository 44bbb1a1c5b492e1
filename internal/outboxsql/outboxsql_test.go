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
