package walrelay

import (
	"fmt"
	"testing"

	"github.com/txoutbox/txoutbox"
)

// take hands a lane's queued events over together, up to the limit, and
// stops before a second event of one aggregate, which stays queued, in
// order, ahead of everything after it.
func TestLaneTakesDistinctAggregates(t *testing.T) {
	l := &lane{}
	for i, agg := range []string{"a", "b", "a", "c", "d"} {
		l.queue = append(l.queue, work{ev: event{row: int64(i + 1), e: txoutbox.Event{AggregateID: agg}}})
	}
	rows := func(ws []work) string {
		var out []int64
		for _, w := range ws {
			out = append(out, w.ev.row)
		}
		return fmt.Sprint(out)
	}
	for _, step := range []struct {
		limit       int
		batch, left string
	}{
		{8, "[1 2]", "[3 4 5]"},
		{2, "[3 4]", "[5]"},
		{8, "[5]", "[]"},
		{8, "[]", "[]"},
	} {
		batch := l.take(nil, step.limit)
		if rows(batch) != step.batch || rows(l.queue) != step.left {
			t.Fatalf("take(limit %d) = %s, queue %s; want %s, queue %s", step.limit, rows(batch), rows(l.queue), step.batch, step.left)
		}
	}
}
