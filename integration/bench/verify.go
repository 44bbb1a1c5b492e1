package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
)

// delivery is what reading a topic back found.
type delivery struct {
	Records         int `json:"records"`
	Missing         int `json:"missing"`
	Duplicates      int `json:"duplicates"`
	OrderViolations int `json:"order_violations"`
}

// plus returns the sum of d and o, for a scenario's total over its rounds;
// a nil d counts as nothing found yet.
func (d *delivery) plus(o *delivery) *delivery {
	var sum delivery
	if d != nil {
		sum = *d
	}
	sum.Records += o.Records
	sum.Missing += o.Missing
	sum.Duplicates += o.Duplicates
	sum.OrderViolations += o.OrderViolations
	return &sum
}

// withDelivery reads the drained topic back and adds what it found to res.
func (e *env) withDelivery(ctx context.Context, res throughput, topic string) (throughput, error) {
	d, err := readBack(ctx, e.brokers, topic, res.Events, 10*time.Second)
	if err != nil {
		return throughput{}, err
	}
	res.delivery = &d
	return res, nil
}

// readBack consumes topic from the start with franz-go until want distinct
// events arrived or nothing new came for idle, and checks per-key order: a
// record whose seq is below the highest seq seen for its key is a violation
// (Kafka keeps order per partition, and a key maps to one partition, so the
// topic holds exactly the order in which the publisher's acks happened).
func readBack(ctx context.Context, brokers []string, topic string, want int, idle time.Duration) (delivery, error) {
	var (
		d       delivery
		highest = map[string]int{}
		seen    = map[seenKey]bool{}
	)
	err := kafkatest.Consume(ctx, brokers, []string{topic}, idle, func(r *kgo.Record) bool {
		d.Records++
		var p benchPayload
		if err := json.Unmarshal(r.Value, &p); err != nil {
			return true
		}
		key := string(r.Key)
		id := seenKey{key, p.Seq}
		if seen[id] {
			d.Duplicates++
			return true
		}
		seen[id] = true
		if h, ok := highest[key]; ok && p.Seq < h {
			d.OrderViolations++
		} else {
			highest[key] = p.Seq
		}
		return len(seen) < want
	})
	if err != nil && !errors.Is(err, kafkatest.ErrIdle) {
		return d, fmt.Errorf("read back %s: %w", topic, err)
	}
	d.Missing = want - len(seen)
	return d, nil
}

type seenKey struct {
	key string
	seq int
}
