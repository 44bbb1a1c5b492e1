package relaye2e

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// With one of three nodes down and a topic that wants all three replicas
// in sync (min.insync.replicas = 3), every produce gets
// NOT_ENOUGH_REPLICAS: the relay backs off and retries for as long as it
// lasts, many times its MaxAttempts, and nothing goes dead; when the node
// is back, everything flows in order.
//
// (Two nodes down would be the same answer on a cluster whose controllers
// run apart; here every node is also a KRaft voter, and two down take the
// controller quorum with them.)
func TestApacheKafkaNotEnoughReplicasIsAnOutage(t *testing.T) {
	b, topic, nodes := realSetup(t, true, map[string]string{"min.insync.replicas": "3"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	down := nodes[2]
	if err := down.Kill(); err != nil {
		t.Fatal(err)
	}
	// The ISR shrinks once the controller fences the node.
	want := b.write(t, topic, 400, 20)
	cfg := b.fastConfig()
	cfg.MaxAttempts = 3
	counted := &publishCounter{next: b.kafkaPublisher(t, kafkapub.Config{Timeout: 5 * time.Second}).(*kafkapub.Publisher), n: map[string]int{}}
	runRelay(t, b.db, counted, cfg)
	waitFor(t, 90*time.Second, "the broker's NOT_ENOUGH_REPLICAS in last_error", func() bool {
		return count(t, b.db, `SELECT count(*) FROM outbox WHERE last_error LIKE '%fewer in-sync replicas than required%'`) > 0
	})
	// Hold the outage until an event was published (and refused) more
	// than twice its MaxAttempts: counted, not slept for (each round
	// takes seconds here: the producer's own retries).
	waitFor(t, 2*time.Minute, "an event refused over 2×MaxAttempts times", func() bool {
		return counted.most() > 2*cfg.MaxAttempts
	})
	if n := count(t, b.db, `SELECT count(*) FROM outbox WHERE state = 'published'`); n != 0 {
		t.Errorf("%d events published with fewer in-sync replicas than the topic requires", n)
	}
	requireNone(t, b.db, `SELECT count(*) FROM outbox WHERE state = 'dead'`, "events went dead in an outage")
	if err := down.Start(ctx); err != nil {
		t.Fatal(err)
	}
	check(t, want, consume(t, b.brokers, topic, len(want), 2*time.Minute))
	waitFor(t, 30*time.Second, "every row published", func() bool {
		return count(t, b.db, `SELECT count(*) FROM outbox WHERE state = 'published'`) == len(want)
	})
}
