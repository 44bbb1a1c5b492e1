package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
)

// BrokerKafka and BrokerKfake name the scenario's broker in the result
// line: the real Apache Kafka cluster of .ci/services, or a kfakeproc
// child.
const (
	BrokerKafka = "kafka"
	BrokerKfake = "kfake"
)

// realCluster is the scenario's broker when it is the real 3-node cluster
// (Env.Kafka): each fault is made on real processes. A broker outage kills
// every node (SIGKILL: their logs are recovered at the restart); a slow
// broker is the node leading most partitions paused (SIGSTOP) past the
// lease; a partition freezes or drops the TCP proxies in front of every
// node (the nodes' PROXIED listeners advertise the proxies' ports).
type realCluster struct {
	env     *Env
	brokers []string
	nodes   []kafkatest.ClusterNode
	proxies proxySet // nil unless BrokerConfig.Proxy

	mu     sync.Mutex
	held   int
	resume []*time.Timer // paused nodes' SIGCONTs to come
}

// proxyPorts: node i's PROXIED listener is its client port + 4 and it
// advertises port + 5, where its proxy listens (.ci/kafka/node.properties).
const (
	proxiedListenerOffset = 4
	proxiedAdvertOffset   = 5
)

func startRealCluster(ctx context.Context, env *Env, cfg BrokerConfig) (*realCluster, error) {
	c := &realCluster{env: env, brokers: env.Kafka, nodes: kafkatest.ClusterNodes()}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := c.ensureRunning(wctx); err != nil {
		return nil, err
	}
	// Topics live on across runs on a real cluster: every topic a
	// scenario reads is made anew, empty.
	configs := map[string]string{}
	if cfg.MaxMessageBytes > 0 {
		configs["max.message.bytes"] = strconv.Itoa(cfg.MaxMessageBytes)
	}
	topics := dedupe(append([]string{TopicEnt, TopicGorm}, cfg.Topics...))
	if err := kafkatest.DeleteTopics(wctx, c.brokers, PoisonTopic); err != nil {
		return nil, err
	}
	for _, t := range topics {
		if err := kafkatest.RecreateTopic(wctx, c.brokers, t, int32(cfg.Partitions), 3, configs); err != nil {
			return nil, err
		}
	}
	if cfg.Proxy {
		for _, n := range c.nodes {
			port, err := strconv.Atoi(n.Addr[strings.LastIndexByte(n.Addr, ':')+1:])
			if err != nil {
				return nil, err
			}
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+proxiedAdvertOffset))
			if err != nil {
				c.proxies.close()
				return nil, fmt.Errorf("proxy for node %d: %w", n.ID, err)
			}
			c.proxies = append(c.proxies, newProxy(ln, "127.0.0.1:"+strconv.Itoa(port+proxiedListenerOffset)))
		}
	}
	return c, nil
}

// addr is what clients bootstrap from: the nodes, or their proxies.
func (c *realCluster) addr() string {
	if c.proxies != nil {
		addrs := make([]string, len(c.proxies))
		for i, p := range c.proxies {
			addrs[i] = p.Addr()
		}
		return strings.Join(addrs, ",")
	}
	return strings.Join(c.brokers, ",")
}

// ensureRunning resumes paused nodes, starts stopped ones and waits until
// all of them serve.
func (c *realCluster) ensureRunning(ctx context.Context) error {
	c.mu.Lock()
	for _, t := range c.resume {
		t.Stop()
	}
	c.resume = nil
	c.mu.Unlock()
	for _, n := range c.nodes {
		if n.Running() {
			_ = n.Resume()
		} else if err := n.Launch(ctx); err != nil {
			return err
		}
	}
	if err := kafkatest.WaitCluster(ctx, c.brokers, len(c.nodes)); err != nil {
		// What each node was doing, for a cluster that did not come back
		// after a fault: the error alone (a deadline) says nothing.
		var nodes []string
		for _, n := range c.nodes {
			nodes = append(nodes, n.Describe(20))
		}
		return fmt.Errorf("the Kafka cluster at %s is not serving (start it with: bash .ci/services kafka): %w\n%s",
			strings.Join(c.brokers, ","), err, strings.Join(nodes, "\n"))
	}
	return nil
}

// stop shuts every node down at once (SIGTERM), as the kfake broker is
// stopped: the whole cluster is gone. Together they are gone in seconds;
// one after another, each would first hand its leaderships to the next.
// A crash with log recovery is LeaderKills' fault; after a crash of every
// node the cluster takes twice as long to serve again, and once took more
// than start's two minutes (docs/development.md).
func (c *realCluster) stop() error {
	errs := make(chan error, len(c.nodes))
	for _, n := range c.nodes {
		go func() {
			if !n.Running() {
				errs <- nil
				return
			}
			start := time.Now()
			err := n.Stop(time.Minute)
			c.env.Logf("kafka node %d stopped in %s (SIGTERM; killed after a minute)", n.ID, time.Since(start).Round(time.Millisecond))
			errs <- err
		}()
	}
	var all []error
	for range c.nodes {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// start starts the nodes again and waits until the cluster serves.
func (c *realCluster) start(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	start := time.Now()
	if err := c.ensureRunning(wctx); err != nil {
		return err
	}
	c.env.Logf("kafka cluster serving again %s after its nodes were started", time.Since(start).Round(time.Millisecond))
	return nil
}

// busiest returns the node leading most partitions of the writers'
// topics: the one whose stall holds most produce requests.
func (c *realCluster) busiest(ctx context.Context) (kafkatest.ClusterNode, error) {
	led := map[int32]int{}
	for _, t := range []string{TopicEnt, TopicGorm} {
		leaders, err := kafkatest.PartitionLeaders(ctx, c.brokers, t)
		if err != nil {
			return kafkatest.ClusterNode{}, err
		}
		for _, l := range leaders {
			led[l]++
		}
	}
	best := c.nodes[0]
	for _, n := range c.nodes {
		if led[n.ID] > led[best.ID] {
			best = n
		}
	}
	return best, nil
}

// holdProduce pauses the busiest node for hold: every produce request to
// the partitions it leads waits that long for an answer (the relays'
// acknowledgements with them), as with an overloaded or stalled broker.
// window is kfake's: how long new requests are caught; a paused node
// catches all of them until it resumes.
func (c *realCluster) holdProduce(ctx context.Context, _, hold time.Duration) error {
	n, err := c.busiest(ctx)
	if err != nil {
		return err
	}
	if err := n.Pause(); err != nil {
		return err
	}
	c.env.Logf("slow broker: node %d (the leader of most partitions) paused for %s", n.ID, hold)
	c.mu.Lock()
	defer c.mu.Unlock()
	if outboxHas(ctx, c.env, `state IN ('pending', 'claimed')`) {
		c.held++ // rows wait to be published: their produce requests wait on the node
	}
	c.resume = append(c.resume, time.AfterFunc(hold, func() { _ = n.Resume() }))
	return nil
}

func (c *realCluster) heldProduce() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held
}

// close leaves the cluster whole for the next scenario.
func (c *realCluster) close() error {
	c.proxies.close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.ensureRunning(ctx); err != nil {
		return err
	}
	// Leadership back on the preferred replicas, every replica in sync:
	// the next user of the cluster sees no election of the controller's
	// own a few minutes later.
	return kafkatest.Settle(ctx, c.brokers)
}

// proxySet is the proxies in front of every node, frozen, thawed and
// dropped together: a partition between the relays and the cluster.
type proxySet []*Proxy

func (s proxySet) Freeze() {
	for _, p := range s {
		p.Freeze()
	}
}

func (s proxySet) Thaw() {
	for _, p := range s {
		p.Thaw()
	}
}

func (s proxySet) Drop() {
	for _, p := range s {
		p.Drop()
	}
}

func (s proxySet) Conns() int {
	n := 0
	for _, p := range s {
		n += p.Conns()
	}
	return n
}

func (s proxySet) close() {
	for _, p := range s {
		p.close()
	}
}

// killLeader SIGKILLs the node leading most of the writers' partitions and
// returns a function that starts it again: the cluster elects new leaders
// from the in-sync replicas meanwhile.
func (c *realCluster) killLeader(ctx context.Context) (restart func(context.Context) error, id int32, err error) {
	n, err := c.busiest(ctx)
	if err != nil {
		return nil, 0, err
	}
	if err := n.Kill(); err != nil {
		return nil, 0, err
	}
	return func(ctx context.Context) error {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := n.Start(wctx); err != nil {
			return err
		}
		return kafkatest.WaitCluster(wctx, c.brokers, len(c.nodes))
	}, n.ID, nil
}
