// Command kfakeproc runs a kfake Kafka-protocol broker in its own OS process,
// so tests can stop it (SIGTERM), kill it or restart it on the same port and
// data directory while their clients keep running, and so its CPU stays out
// of the profile of the process under test.
//
//	kfakeproc -port 39092 -dir /tmp/broker -topics orders,payments -partitions 8
//
// It prints "kfakeproc: listening on ADDR" on stdout once the broker accepts
// connections, and closes the cluster cleanly (flushing DataDir) on SIGINT or
// SIGTERM. Topics named by -topics are created on first start; with
// -auto-create=false a produce to any other topic is refused with
// UNKNOWN_TOPIC_OR_PARTITION.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	var (
		port       = flag.Int("port", 0, "loopback port to listen on (0: any free port)")
		dir        = flag.String("dir", "", "data directory; a restart with the same directory serves what was acknowledged before (empty: in memory)")
		topics     = flag.String("topics", "", "comma-separated topics to create")
		partitions = flag.Int("partitions", 8, "partitions of created topics, and of auto-created ones")
		autoCreate = flag.Bool("auto-create", true, "create unknown topics on first use")
		maxMessage = flag.Int("max-message-bytes", 0, "broker message.max.bytes: larger record batches are refused with MESSAGE_TOO_LARGE (0: kfake's default, 1048588)")
	)
	flag.Parse()
	if err := run(*port, *dir, *topics, *partitions, *autoCreate, *maxMessage); err != nil {
		fmt.Fprintln(os.Stderr, "kfakeproc:", err)
		os.Exit(1)
	}
}

func run(port int, dir, topics string, partitions int, autoCreate bool, maxMessage int) error {
	if partitions < 1 {
		return fmt.Errorf("-partitions must be at least 1, got %d", partitions)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.DefaultNumPartitions(partitions),
	}
	if dir != "" {
		opts = append(opts, kfake.DataDir(dir))
	}
	if autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	if maxMessage > 0 {
		opts = append(opts, kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(maxMessage)}))
	}
	var names []string
	for _, t := range strings.Split(topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			names = append(names, t)
		}
	}
	if len(names) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(partitions), names...))
	}

	// Subscribe before the broker exists, so a signal sent right after the
	// "listening" line is never lost to the default handler.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)

	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("start broker: %w", err)
	}
	fmt.Printf("kfakeproc: listening on %s\n", strings.Join(c.ListenAddrs(), ","))
	<-sig
	c.Close()
	return nil
}
