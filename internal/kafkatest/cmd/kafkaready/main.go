// Command kafkaready waits until a Kafka cluster serves: every expected
// broker is in the metadata, a replicated topic exists and takes a record
// with acks=all. A broker that listens is not yet one that serves (it may
// still be fenced, or the controller quorum may have no leader), and the
// tests' first produce would otherwise race it. .ci/services runs it after
// starting the cluster.
//
//	go run ./cmd/kafkaready -brokers 127.0.0.1:19092,127.0.0.1:19192,127.0.0.1:19292
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
)

func main() {
	brokers := flag.String("brokers", kafkatest.ClusterBrokersDefault, "comma-separated broker addresses")
	want := flag.Int("want", 3, "brokers the metadata must list")
	timeout := flag.Duration("timeout", 2*time.Minute, "how long to wait")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	start := time.Now()
	if err := kafkatest.WaitCluster(ctx, strings.Split(*brokers, ","), *want); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("not serving after %s: %w", *timeout, err)
		}
		fmt.Fprintln(os.Stderr, "kafkaready:", err)
		os.Exit(1)
	}
	fmt.Printf("kafkaready: %d brokers serving at %s (%.1fs)\n", *want, *brokers, time.Since(start).Seconds())
}
