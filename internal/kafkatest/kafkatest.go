// Package kafkatest is the Kafka side of txoutbox's test toolkit: a
// Kafka-protocol broker (franz-go's kfake) on a loopback port, in process
// (New, Start) or as the kfakeproc process (Build, StartProc); reading a
// topic back with an independent franz-go client (Consume, ReadAll); and a
// publisher that acknowledges without sending (NopPublisher).
//
// It is a module of its own, apart from testkit, so that only the modules
// whose tests talk to Kafka (the CLI's, the integration module) require
// kfake: a library module's requirements end up in its users' module graphs.
package kafkatest

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// New starts a kfake cluster on loopback ports for the test and returns it;
// c.ListenAddrs() are the broker addresses real clients dial. Topics are
// auto-created unless opts say otherwise. The cluster is closed when the test
// ends.
func New(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// Start is New outside a test: the caller closes the cluster.
func Start(opts ...kfake.Opt) (*kfake.Cluster, error) {
	all := append([]kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4)}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: start kfake broker: %w", err)
	}
	return c, nil
}
