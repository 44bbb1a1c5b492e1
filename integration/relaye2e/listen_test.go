package relaye2e

import (
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// A relay woken by NOTIFY publishes a new event long before its next poll.
func TestNotifyWakesTheRelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.fastConfig()
	cfg.PollInterval = time.Hour
	pool, statements := b.db.Traced(t)
	runRelay(t, &testkit.DB{SQL: pool, URL: b.db.URL, Schema: b.db.Schema}, b.kafkaPublisher(t, kafkapub.Config{}), cfg)
	waitFor(t, 10*time.Second, "the relay to own its shards", func() bool {
		return count(t, b.db, "SELECT count(*) FROM outbox_shards WHERE owner IS NOT NULL") == 256
	})
	// LISTEN wakes the relay once it takes effect; when a claim that began
	// after it has ended, the wake-ups of start-up are served, and only a
	// notification (or the hourly poll) can make it claim again.
	waitFor(t, 10*time.Second, "the relay to LISTEN and claim after it", func() bool {
		listens := statements.Matching("LISTEN ", time.Time{})
		return len(listens) > 0 && len(statements.Matching(claimSQL, listens[0].End)) > 0
	})
	want := b.write(t, "orders", 1, 1)
	check(t, want, consume(t, b.brokers, "orders", 1, 20*time.Second))
}
