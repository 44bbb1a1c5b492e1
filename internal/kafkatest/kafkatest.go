// Package kafkatest starts a Kafka-protocol broker (franz-go's kfake) on a
// loopback port for a test, which real clients dial over TCP.
//
// It is a module of its own, apart from testkit, so that only the modules
// whose tests talk to Kafka (the CLI's, the integration module) require
// kfake: a library module's requirements end up in its users' module graphs.
package kafkatest

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// New starts a kfake cluster on loopback ports for the test and returns it;
// c.ListenAddrs() are the broker addresses real clients dial. Topics are
// auto-created unless opts say otherwise. The cluster is closed when the test
// ends.
func New(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	all := append([]kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4)}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		t.Fatalf("kafkatest: start kfake broker: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}
