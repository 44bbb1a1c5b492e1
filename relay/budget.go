package relay

import "sync/atomic"

// budget counts the claimed rows not yet recorded as published, failed or
// released, nor dropped, and their payload bytes: what the relay holds in
// memory, bounded by MaxInFlight and MaxInFlightBytes. The claimer takes
// from it; the completer gives back once an outcome is committed, a lane
// when it drops a row.
type budget struct {
	maxRows  int
	maxBytes int64

	rows  atomic.Int64
	bytes atomic.Int64
	freed chan struct{} // signalled when rows are given back
}

func newBudget(maxRows int, maxBytes int64) *budget {
	return &budget{maxRows: maxRows, maxBytes: maxBytes, freed: make(chan struct{}, 1)}
}

// held is how many rows are held.
func (b *budget) held() int64 { return b.rows.Load() }

// free is the room left, in rows and in bytes.
func (b *budget) free() (rows int, bytes int64) {
	return b.maxRows - int(b.rows.Load()), b.maxBytes - b.bytes.Load()
}

// take counts rows claimed, of bytes of payload in all.
func (b *budget) take(rows int, bytes int64) {
	b.rows.Add(int64(rows))
	b.bytes.Add(bytes)
}

// give returns rows, of bytes of payload in all, and wakes the claimer.
func (b *budget) give(rows int, bytes int64) {
	b.rows.Add(-int64(rows))
	b.bytes.Add(-bytes)
	signal(b.freed)
}

// drop forgets a row without recording anything: its incarnation ended, so
// the row is someone else's to claim (see incarnation).
func (b *budget) drop(row *claimedRow) { b.give(1, row.bytes) }

// reset starts a Run with nothing held: rows a Run before gave up
// recording at shutdown are its incarnation's, to be taken over.
func (b *budget) reset() {
	b.rows.Store(0)
	b.bytes.Store(0)
}
