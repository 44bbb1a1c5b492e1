package relaye2e

import (
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// Health follows the relay: running and heartbeating with its shards while
// it runs, nothing after it stopped.
func TestHealth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.fastConfig()
	r, err := relay.New(b.db.SQL, &pacedPublisher{delays: []time.Duration{0}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if h := r.Health(); h.Running || h.Heartbeating {
		t.Fatalf("before Run: %+v", h)
	}
	r, stop := runRelay(t, b.db, b.kafkaPublisher(t, kafkapub.Config{}), cfg)
	waitFor(t, 10*time.Second, "the relay to heartbeat and own its shards", func() bool {
		h := r.Health()
		return h.Running && h.Heartbeating && h.Shards == 256 && h.Incarnation != "" && h.SinceHeartbeat < time.Second
	})
	stop()
	if h := r.Health(); h.Running || h.Heartbeating || h.Shards != 0 {
		t.Errorf("after Run returned: %+v", h)
	}
}
