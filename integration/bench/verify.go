package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// delivery is what reading a topic back found.
type delivery struct {
	Records         int `json:"records"`
	Missing         int `json:"missing"`
	Duplicates      int `json:"duplicates"`
	OrderViolations int `json:"order_violations"`
}

// readBack consumes topic from the start with franz-go until want distinct
// events arrived or nothing new came for idle, and checks per-key order: a
// record whose seq is below the highest seq seen for its key is a violation
// (Kafka keeps order per partition, and a key maps to one partition, so the
// topic holds exactly the order in which the publisher's acks happened).
func readBack(ctx context.Context, brokerAddr, topic string, want int, idle time.Duration) (delivery, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokerAddr),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	if err != nil {
		return delivery{}, fmt.Errorf("read back %s: %w", topic, err)
	}
	defer cl.Close()

	var (
		d       delivery
		highest = map[string]int{}
		seen    = map[seenKey]bool{}
		last    = time.Now()
	)
	for len(seen) < want {
		pollCtx, cancel := context.WithTimeout(ctx, idle/4)
		fetches := cl.PollFetches(pollCtx)
		cancel()
		if ctx.Err() != nil {
			return d, ctx.Err()
		}
		for _, fe := range fetches.Errors() {
			if fe.Err != context.DeadlineExceeded {
				return d, fmt.Errorf("read back %s: %w", topic, fe.Err)
			}
		}
		n := 0
		fetches.EachRecord(func(r *kgo.Record) {
			n++
			d.Records++
			var p benchPayload
			if err := json.Unmarshal(r.Value, &p); err != nil {
				return
			}
			key := string(r.Key)
			id := seenKey{key, p.Seq}
			if seen[id] {
				d.Duplicates++
				return
			}
			seen[id] = true
			if h, ok := highest[key]; ok && p.Seq < h {
				d.OrderViolations++
				return
			}
			highest[key] = p.Seq
		})
		if n > 0 {
			last = time.Now()
		} else if time.Since(last) > idle {
			break
		}
	}
	d.Missing = want - len(seen)
	return d, nil
}

type seenKey struct {
	key string
	seq int
}
