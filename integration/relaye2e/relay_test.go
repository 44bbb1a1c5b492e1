package relaye2e

import (
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

func TestRelayDeliversEverythingInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := b.write(t, "orders", 3000, 50)
	_, stop := runRelay(t, b.db, b.kafkaPublisher(t, kafkapub.Config{}), b.fastConfig())
	got := consume(t, b.brokers, "orders", len(want), 60*time.Second)
	check(t, want, got)
	waitFor(t, 10*time.Second, "all rows marked published", func() bool {
		return count(t, b.db, "SELECT count(*) FROM outbox WHERE state = 'published'") == len(want)
	})
	stop()
	requireNone(t, b.db, "SELECT count(*) FROM outbox_relays", "relay rows left after a clean shutdown")
	requireNone(t, b.db, "SELECT count(*) FROM outbox_shards WHERE owner IS NOT NULL", "shards still owned after a clean shutdown")
}

func TestThreeRelaysKeepPerKeyOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := b.kafkaPublisher(t, kafkapub.Config{})
	for range 3 {
		cfg := b.fastConfig()
		cfg.BatchSize = 50
		runRelay(t, b.db, pub, cfg)
	}
	// Write while the relays run and rebalance, so batches interleave.
	want := b.write(t, "orders", 4000, 20)
	got := consume(t, b.brokers, "orders", len(want), 60*time.Second)
	check(t, want, got)
	waitFor(t, 10*time.Second, "every relay to own shards", func() bool {
		return count(t, b.db, "SELECT count(DISTINCT owner) FROM outbox_shards") == 3
	})
}
