package console

import (
	"sync"
	"time"

	"github.com/txoutbox/txoutbox/outboxadmin"
)

// history keeps the overview's samples in memory: the counts of the
// status cache, about one per every (fewer while counts are paced), none
// older than span (360 samples with the defaults, a few kilobytes). It
// lives as long as the Console: a restart starts it empty, and without Run
// it grows only while a page polls.
type history struct {
	every, span time.Duration

	mu      sync.Mutex
	samples []outboxadmin.Snapshot
}

func newHistory(every, span time.Duration) *history {
	return &history{every: every, span: span}
}

// add records a count's snapshot, unless the last is younger than every
// by the database clock, and drops the samples older than span.
func (h *history) add(s outboxadmin.Snapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.samples); n > 0 && s.At.Sub(h.samples[n-1].At) < h.every/2 {
		return
	}
	h.samples = append(h.samples, s)
	cut := 0
	for cut < len(h.samples) && s.At.Sub(h.samples[cut].At) > h.span {
		cut++
	}
	h.samples = append(h.samples[:0], h.samples[cut:]...)
}

// point is one sample as the chart draws it.
type point struct {
	At         time.Time `json:"at"`
	Backlog    int64     `json:"backlog"`
	LagSeconds float64   `json:"lag_seconds"`
	Dead       int64     `json:"dead"`
	// PublishRate is the events published per second since the previous
	// sample (outboxadmin.PublishRate); absent on the first.
	PublishRate *float64 `json:"publish_rate,omitempty"`
}

func (h *history) points() []point {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]point, len(h.samples))
	for i, s := range h.samples {
		out[i] = point{At: s.At, Backlog: s.Backlog, LagSeconds: s.Lag.Seconds(), Dead: s.Dead}
		if i > 0 {
			r := outboxadmin.PublishRate(h.samples[i-1], s)
			out[i].PublishRate = &r
		}
	}
	return out
}
