package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// A run on the real cluster deletes the topics it made, each once however
// often it made it again, so it leaves none of its records behind.
func TestRunDropsItsTopics(t *testing.T) {
	kafkatest.LockCluster(t, false)
	brokers := kafkatest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := &env{brokers: brokers, real: true, opts: options{partitions: 2}}
	base := fmt.Sprintf("bench.test.%d", time.Now().UnixNano())
	names := []string{base + ".a", base + ".b"}
	t.Cleanup(func() { _ = kafkatest.DeleteTopics(context.Background(), brokers, names...) })
	for _, name := range []string{names[0], names[1], names[0]} {
		if _, err := e.topic(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.recreateTopic(ctx, names[1], map[string]string{"message.timestamp.type": "LogAppendTime"}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(e.topics) != fmt.Sprint(names) {
		t.Fatalf("the run recorded topics %v, want %v", e.topics, names)
	}
	for _, name := range names {
		if _, err := kafkatest.PartitionLeaders(ctx, brokers, name); err != nil {
			t.Fatalf("topic %s before dropTopics: %v", name, err)
		}
	}

	e.dropTopics()
	for _, name := range names {
		var err error
		if !testkit.Eventually(time.Minute, func() bool {
			_, err = kafkatest.PartitionLeaders(ctx, brokers, name)
			return errors.Is(err, kerr.UnknownTopicOrPartition)
		}) {
			t.Fatalf("topic %s is still on the cluster after dropTopics: %v", name, err)
		}
	}
	if len(e.topics) != 0 {
		t.Fatalf("topics left to drop: %v", e.topics)
	}
}
