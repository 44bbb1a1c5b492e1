package testkit

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka starts a kfake cluster on loopback ports for the test and returns
// it; c.ListenAddrs() are the broker addresses real clients dial. Topics are
// auto-created unless opts say otherwise. The cluster is closed when the test
// ends.
func Kafka(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	all := append([]kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4)}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		t.Fatalf("testkit: start kfake broker: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}
