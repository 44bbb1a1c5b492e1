package relay

import (
	"testing"
	"time"
)

func TestBackoffGrowsWithJitterUpToTheCap(t *testing.T) {
	t.Parallel()
	base, limit := time.Second, time.Minute
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 6: 32 * time.Second, 7: time.Minute, 100: time.Minute} {
		for range 50 {
			d := backoff(attempt, base, limit)
			if d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", attempt, d, want/2, want)
			}
		}
	}
}

func TestAssignShardsCoversEveryShardOnce(t *testing.T) {
	t.Parallel()
	live := []string{"a", "b", "c"}
	owner := map[int]string{}
	for _, id := range live {
		for _, s := range assignShards(id, live) {
			if prev, ok := owner[s]; ok {
				t.Fatalf("shard %d assigned to %s and %s", s, prev, id)
			}
			owner[s] = id
		}
	}
	if len(owner) != numShards {
		t.Fatalf("%d of %d shards assigned", len(owner), numShards)
	}
	// Rendezvous hashing: when c leaves, a and b keep every shard they had.
	for _, id := range []string{"a", "b"} {
		after := map[int]bool{}
		for _, s := range assignShards(id, []string{"a", "b"}) {
			after[s] = true
		}
		for _, s := range assignShards(id, live) {
			if !after[s] {
				t.Fatalf("shard %d moved away from %s when c left", s, id)
			}
		}
	}
}
