package publish

// Lane is the lane, of n, that publishes the events of an aggregate:
// always the same one, so they are published one after another, in
// order. It is FNV-1a of the id (hash/fnv's New32a, without its
// allocations) modulo n.
func Lane(aggregateID string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(aggregateID); i++ {
		h ^= uint32(aggregateID[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}
