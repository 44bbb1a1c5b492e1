package relaye2e

import (
	"net"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// A relay started while no broker answers (a pod restarted in a Kafka
// outage) does not fail at start: the publisher connects at a later
// publish, the failures until then are an outage (nothing goes dead), and
// every event arrives once the broker is up.
func TestPublisherMadeInAnOutageConnectsLater(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nothing listens: connections are refused

	pub, err := kafkapub.NewPublisher([]string{addr}, kafkapub.Config{Timeout: time.Second})
	if err != nil {
		t.Fatalf("NewPublisher with no broker answering = %v, want a publisher that connects later", err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	err = pub.Publish("orders", message.NewMessage("m1", []byte("{}")))
	if err == nil || relay.IsPermanent(err) {
		t.Fatalf("Publish with no broker = %v, want an outage error", err)
	}

	b := setup(t)
	cfg := b.fastConfig()
	cfg.MaxAttempts = 2
	written := b.write(t, "orders", 20, 4)
	_, stop := runRelay(t, b.db, pub, cfg)
	defer stop()
	waitFor(t, 20*time.Second, "publishes failing in the outage, MaxAttempts times at least", func() bool {
		return count(t, b.db, `SELECT count(*) FROM outbox WHERE attempts >= $1`, cfg.MaxAttempts) > 0
	})
	kafkatest.New(t, kfake.Ports(port))
	got := consume(t, []string{addr}, "orders", len(written), 30*time.Second)
	check(t, written, got)
	requireNone(t, b.db, `SELECT count(*) FROM outbox WHERE state = 'dead'`, "events dead after a broker absent at start")
}
