package relaye2e

import (
	"log/slog"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/relay"
)

// rebalanceBound is how soon shards must move when a relay joins or leaves:
// far below the heartbeat of these tests (10 minutes), so only the NOTIFY
// a joining or leaving relay sends can meet it. A relay's second round
// comes at a random point of the interval after its first: at 30 s, one
// run in ten or so would have met the bound by a timed round.
const rebalanceBound = 3 * time.Second

// Relays rebalance at once when a peer joins or leaves, not at their next
// heartbeat.
func TestRebalanceOnJoinAndLeaveIsAnnounced(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	slow := func(id string) relay.Config {
		return relay.Config{
			Table: db.Table(), ID: id,
			HeartbeatInterval: 10 * time.Minute, StaleAfter: 30 * time.Minute, LeaseDuration: 10 * time.Minute,
			Logger: slog.New(slog.DiscardHandler),
		}
	}
	runRelay(t, db, kafkatest.NopPublisher{}, slow("relay-a"))
	waitFor(t, rebalanceBound, "relay-a to own every shard", func() bool {
		return count(t, db, "SELECT count(*) FROM outbox_shards WHERE owner LIKE 'relay-a#%'") == 256
	})

	start := time.Now()
	_, stopB := runRelay(t, db, kafkatest.NopPublisher{}, slow("relay-b"))
	waitFor(t, rebalanceBound, "relay-a to hand relay-b its share", func() bool {
		return count(t, db, `SELECT count(*) FROM outbox_shards WHERE owner LIKE 'relay-b#%'`) > 0 &&
			count(t, db, `SELECT count(*) FROM outbox_shards WHERE owner LIKE 'relay-a#%' OR owner LIKE 'relay-b#%'`) == 256
	})
	t.Logf("join: shards split in %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	stopB()
	waitFor(t, rebalanceBound, "relay-a to take relay-b's shards back", func() bool {
		return count(t, db, "SELECT count(*) FROM outbox_shards WHERE owner LIKE 'relay-a#%'") == 256
	})
	t.Logf("leave: shards back in %s", time.Since(start).Round(time.Millisecond))
}
