package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ClusterBrokersDefault is where .ci/services runs its 3-broker Apache
// Kafka cluster (KRaft, replication factor 3, min.insync.replicas = 2).
const ClusterBrokersDefault = "127.0.0.1:19092,127.0.0.1:19192,127.0.0.1:19292"

// EnvClusterBrokers names a real cluster for the tests instead of the
// default one; a comma-separated list of broker addresses.
const EnvClusterBrokers = "TXOUTBOX_TEST_KAFKA_BROKERS"

// ClusterBrokers returns the brokers of the real Kafka cluster the tests
// use: EnvClusterBrokers, or ClusterBrokersDefault.
func ClusterBrokers() []string {
	s := os.Getenv(EnvClusterBrokers)
	if s == "" {
		s = ClusterBrokersDefault
	}
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' })
}

// Cluster returns the brokers of the real Kafka cluster after checking,
// within 30 seconds, that all three serve. A cluster that is not there
// fails the test, with how to start it: the tests never skip.
func Cluster(t testing.TB) []string {
	t.Helper()
	brokers := ClusterBrokers()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := WaitCluster(ctx, brokers, len(brokers)); err != nil {
		t.Fatalf("kafkatest: the Kafka cluster at %s is not serving (start it with: bash .ci/services kafka): %v",
			strings.Join(brokers, ","), err)
	}
	return brokers
}

// readyTopic is the replicated topic WaitCluster writes to.
const readyTopic = "txoutbox_ready"

// WaitCluster waits until the metadata of the cluster at brokers lists
// want brokers and a record written with acks=all to a topic of
// replication factor want (at most 3) is acknowledged.
func WaitCluster(ctx context.Context, brokers []string, want int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProduceRequestTimeout(5*time.Second), kgo.RecordDeliveryTimeout(10*time.Second),
		kgo.AllowAutoTopicCreation())
	if err != nil {
		return fmt.Errorf("kafkatest: client: %w", err)
	}
	defer cl.Close()
	rf := int16(min(want, 3))
	var last error
	for {
		if last = clusterReady(ctx, cl, want, rf); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func clusterReady(ctx context.Context, cl *kgo.Client, want int, rf int16) error {
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	if len(meta.Brokers) < want {
		return fmt.Errorf("metadata lists %d of %d brokers", len(meta.Brokers), want)
	}
	create := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = readyTopic, 1, rf
	create.Topics = append(create.Topics, ct)
	create.TimeoutMillis = 5000
	resp, err := create.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	for _, tr := range resp.Topics {
		if err := kerr.ErrorForCode(tr.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", readyTopic, err)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(pctx, &kgo.Record{Topic: readyTopic, Value: []byte("ready")}).FirstErr(); err != nil {
		return fmt.Errorf("produce with acks=all: %w", err)
	}
	return nil
}

// The cluster's other listeners, as .ci/services sets them up: each
// node's TLS listener is its client port + 2 (a certificate for 127.0.0.1
// signed by ClusterCAFile's CA), its SASL/SCRAM listener port + 3
// (SCRAM-SHA-256 and SCRAM-SHA-512, user ClusterSCRAMUser).
const (
	ClusterTLSBrokersDefault  = "127.0.0.1:19094,127.0.0.1:19194,127.0.0.1:19294"
	ClusterSASLBrokersDefault = "127.0.0.1:19095,127.0.0.1:19195,127.0.0.1:19295"
	ClusterSCRAMUser          = "txoutbox"
	ClusterSCRAMPassword      = "txoutbox-test-secret"
)

// EnvServicesDir is where .ci/services keeps its state (the Kafka jars,
// the cluster's data, certificates and start scripts); default
// /var/lib/txoutbox-services, as in the script.
const EnvServicesDir = "TXOUTBOX_SERVICES_DIR"

// ServicesDir is where .ci/services keeps its state: EnvServicesDir, or
// /var/lib/txoutbox-services.
func ServicesDir() string {
	if d := os.Getenv(EnvServicesDir); d != "" {
		return d
	}
	return "/var/lib/txoutbox-services"
}

// ClusterCAFile is the PEM file of the CA that signs the cluster's TLS
// listeners.
func ClusterCAFile() string { return filepath.Join(ServicesDir(), "kafka-tls", "ca.pem") }

// ClusterNode is one node (broker and KRaft controller in one JVM) of the
// cluster .ci/services runs, for tests that kill, pause and restart it.
type ClusterNode struct {
	ID   int32  // node.id, the broker id in metadata
	Addr string // its PLAINTEXT listener
	dir  string
}

// ClusterNodes returns the cluster's three nodes.
func ClusterNodes() []ClusterNode {
	addrs := strings.Split(ClusterBrokersDefault, ",")
	nodes := make([]ClusterNode, len(addrs))
	for i, a := range addrs {
		nodes[i] = ClusterNode{ID: int32(i + 1), Addr: a, dir: filepath.Join(ServicesDir(), "kafka", fmt.Sprintf("n%d", i+1))}
	}
	return nodes
}

// PID returns the node's process id, as its start script recorded it.
func (n ClusterNode) PID() (int, error) {
	b, err := os.ReadFile(filepath.Join(n.dir, "pid"))
	if err != nil {
		return 0, fmt.Errorf("kafkatest: node %d: %w", n.ID, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// Running reports whether the node's process is alive (paused included);
// a zombie, killed but not yet reaped, is not.
func (n ClusterNode) Running() bool {
	pid, err := n.PID()
	if err != nil || syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}

func (n ClusterNode) signal(sig syscall.Signal) error {
	pid, err := n.PID()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("kafkatest: node %d (pid %d): %s: %w", n.ID, pid, sig, err)
	}
	return nil
}

// Describe is the node's state for a failure message: whether its process
// runs, and the last lines of its log (warnings, errors and starts; the
// log's connection-refused lines, which every restart writes by the
// dozen, left out).
func (n ClusterNode) Describe(lines int) string {
	state := "not running"
	if n.Running() {
		state = "running"
	}
	b, err := os.ReadFile(filepath.Join(n.dir, "server.log"))
	if err != nil {
		return fmt.Sprintf("node %d: %s; no log: %v", n.ID, state, err)
	}
	var keep []string
	for l := range strings.Lines(string(b)) {
		if !strings.Contains(l, "could not be established") {
			keep = append(keep, "  "+l)
		}
	}
	keep = keep[max(0, len(keep)-lines):]
	return fmt.Sprintf("node %d: %s; the last %d lines of %s:\n%s", n.ID, state, len(keep), filepath.Join(n.dir, "server.log"), strings.Join(keep, ""))
}

// Kill sends SIGKILL, as a host failure or an OOM kill would, and waits
// until the process is gone: its log is recovered at the next Start.
func (n ClusterNode) Kill() error {
	if err := n.signal(syscall.SIGKILL); err != nil {
		return err
	}
	for range 100 {
		if !n.Running() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("kafkatest: node %d still running 5s after SIGKILL", n.ID)
}

// Stop sends SIGTERM, as an orderly shutdown does, and waits up to within
// for the process to exit: the node writes its clean-shutdown marker and
// recovers no log at the next Start. Past within it is killed (Kill).
func (n ClusterNode) Stop(within time.Duration) error {
	if err := n.signal(syscall.SIGTERM); err != nil {
		return err
	}
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if !n.Running() {
			return nil
		}
	}
	return n.Kill()
}

// Pause sends SIGSTOP: the node keeps its sockets open and answers nothing,
// as in a long GC or VM stall.
func (n ClusterNode) Pause() error { return n.signal(syscall.SIGSTOP) }

// Resume sends SIGCONT to a paused node.
func (n ClusterNode) Resume() error { return n.signal(syscall.SIGCONT) }

// Launch starts a node that is not running with its start script, on its
// own data directory, and returns at once. Nodes that were all down must
// be launched together: a node opens its client port only once the
// controller quorum (two of the three) is back.
func (n ClusterNode) Launch(ctx context.Context) error {
	if n.Running() {
		return nil
	}
	if out, err := exec.CommandContext(ctx, filepath.Join(n.dir, "start")).CombinedOutput(); err != nil {
		return fmt.Errorf("kafkatest: start node %d: %w: %s", n.ID, err, out)
	}
	return nil
}

// Start launches a node that is not running and waits until it listens;
// with the quorum down, use Launch on every node, then WaitCluster.
func (n ClusterNode) Start(ctx context.Context) error {
	if err := n.Launch(ctx); err != nil {
		return err
	}
	for {
		if c, err := net.DialTimeout("tcp", n.Addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: node %d does not listen on %s: %w", n.ID, n.Addr, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// LockCluster takes the real cluster for the test across processes until
// it ends: shared for tests that only use it, exclusive for tests that
// kill, pause or restart its nodes, so a fault test never hits another
// test's records. Under -short it skips the test: every test on the real
// cluster takes it here first, and the development loop runs without it.
func LockCluster(t testing.TB, exclusive bool) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skips a test on the real Apache Kafka cluster (the README's test command runs it)")
	}
	unlock, err := LockClusterFile(exclusive)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
}

// LockClusterFile is LockCluster outside a test (the crash suite's
// runner): an flock on a file in the temporary directory, waiting as long
// as it takes. Call unlock to let it go; it also ends with the process.
func LockClusterFile(exclusive bool) (unlock func(), err error) {
	path := filepath.Join(os.TempDir(), "txoutbox-kafka-cluster.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: lock the cluster: %w", err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("kafkatest: lock the cluster: %w", err)
	}
	return func() { f.Close() }, nil
}

// FaultCluster is Cluster for a test that injects faults into the cluster's
// nodes: it takes the cluster exclusively and, when the test ends, resumes
// paused nodes, starts stopped ones and waits until all three serve again,
// so the next test finds the cluster whole.
func FaultCluster(t testing.TB) ([]string, []ClusterNode) {
	t.Helper()
	LockCluster(t, true)
	brokers := Cluster(t)
	nodes := ClusterNodes()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, n := range nodes {
			if n.Running() {
				_ = n.Resume()
			} else if err := n.Launch(ctx); err != nil {
				t.Errorf("restore the cluster: %v", err)
			}
		}
		if err := WaitCluster(ctx, brokers, len(nodes)); err != nil {
			t.Errorf("restore the cluster: %v", err)
		}
		if err := Settle(ctx, brokers); err != nil {
			t.Errorf("restore the cluster: %v", err)
		}
	})
	return brokers, nodes
}

// Settle waits until every partition of every topic has all its replicas
// in sync and is led by its preferred replica, electing preferred leaders
// where it is not. A fault test leaves leadership where its elections put
// it; left alone, the controller moves it back minutes later (its leader
// imbalance check), in the middle of whichever test uses the cluster then,
// whose producers see NOT_LEADER answers and retry. Fault tests call it
// before they let the cluster go.
func Settle(ctx context.Context, brokers []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("kafkatest: client: %w", err)
	}
	defer cl.Close()
	for {
		unsettled := ""
		elect := map[string][]int32{}
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		if err == nil {
			for _, t := range resp.Topics {
				if t.Topic == nil {
					continue
				}
				for _, p := range t.Partitions {
					switch {
					case kerr.ErrorForCode(p.ErrorCode) != nil, p.Leader < 0, len(p.ISR) < len(p.Replicas):
						unsettled = fmt.Sprintf("%s/%d (leader %d, %d of %d replicas in sync)", *t.Topic, p.Partition, p.Leader, len(p.ISR), len(p.Replicas))
					case len(p.Replicas) > 0 && p.Leader != p.Replicas[0]:
						unsettled = fmt.Sprintf("%s/%d (led by %d, preferred %d)", *t.Topic, p.Partition, p.Leader, p.Replicas[0])
						elect[*t.Topic] = append(elect[*t.Topic], p.Partition)
					}
				}
			}
		} else {
			unsettled = err.Error()
		}
		if unsettled == "" {
			return nil
		}
		if len(elect) > 0 {
			req := kmsg.NewPtrElectLeadersRequest()
			req.ElectionType = 0 // preferred
			req.TimeoutMillis = 10_000
			for topic, parts := range elect {
				rt := kmsg.NewElectLeadersRequestTopic()
				rt.Topic, rt.Partitions = topic, parts
				req.Topics = append(req.Topics, rt)
			}
			// Its answer is read back from the metadata on the next pass.
			_, _ = req.RequestWith(ctx, cl)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: the cluster did not settle: %s: %w", unsettled, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// CreateTopic creates topic with partitions partitions replicated to
// replicas nodes and the given topic configs (nil values are left out),
// and waits until every partition has a leader.
func CreateTopic(ctx context.Context, brokers []string, topic string, partitions int32, replicas int16, configs map[string]string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("kafkatest: client: %w", err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, replicas
	for k, v := range configs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafkatest: create topic %s: %w", topic, err)
	}
	for _, tr := range resp.Topics {
		if err := kerr.ErrorForCode(tr.ErrorCode); err != nil {
			return fmt.Errorf("kafkatest: create topic %s: %w", topic, err)
		}
	}
	for {
		leaders, err := PartitionLeaders(ctx, brokers, topic)
		if err == nil && len(leaders) == int(partitions) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: topic %s has no leader for every partition: %w", topic, errors.Join(ctx.Err(), err))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// PartitionLeaders returns the broker id leading each partition of topic
// that has a leader.
func PartitionLeaders(ctx context.Context, brokers []string, topic string) (map[int32]int32, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, fmt.Errorf("kafkatest: client: %w", err)
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: metadata of %s: %w", topic, err)
	}
	out := map[int32]int32{}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("kafkatest: metadata of %s: %w", topic, err)
		}
		for _, p := range t.Partitions {
			if kerr.ErrorForCode(p.ErrorCode) == nil && p.Leader >= 0 {
				out[p.Partition] = p.Leader
			}
		}
	}
	return out, nil
}

// DeleteTopics deletes those of topics that exist.
func DeleteTopics(ctx context.Context, brokers []string, topics ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("kafkatest: client: %w", err)
	}
	defer cl.Close()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = 30000
	for _, t := range topics {
		rt := kmsg.NewDeleteTopicsRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
		req.TopicNames = append(req.TopicNames, t)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafkatest: delete topics: %w", err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			}
			return fmt.Errorf("kafkatest: delete topic %s: %w", name, err)
		}
	}
	return nil
}

// RecreateTopic deletes topic if it exists and creates it empty, as
// CreateTopic does, retrying while the deletion completes: a real
// cluster keeps topics, and their records, across runs.
func RecreateTopic(ctx context.Context, brokers []string, topic string, partitions int32, replicas int16, configs map[string]string) error {
	if err := DeleteTopics(ctx, brokers, topic); err != nil {
		return err
	}
	for {
		err := CreateTopic(ctx, brokers, topic, partitions, replicas, configs)
		if err == nil || !errors.Is(err, kerr.TopicAlreadyExists) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: recreate topic %s: %w", topic, errors.Join(ctx.Err(), err))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// WaitInSync waits until every partition of topics that exist has a
// leader and all its replicas in sync: after a node was paused or killed,
// a newly elected leader's high-water mark can lag what the old one
// acknowledged until its followers caught up, and end offsets read then
// are too low.
func WaitInSync(ctx context.Context, brokers []string, topics []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("kafkatest: client: %w", err)
	}
	defer cl.Close()
	for {
		req := kmsg.NewPtrMetadataRequest()
		for _, topic := range topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(topic)
			req.Topics = append(req.Topics, rt)
		}
		lagging := ""
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			for _, t := range resp.Topics {
				if kerr.ErrorForCode(t.ErrorCode) == kerr.UnknownTopicOrPartition {
					continue
				}
				for _, p := range t.Partitions {
					if kerr.ErrorForCode(p.ErrorCode) != nil || p.Leader < 0 || len(p.ISR) < len(p.Replicas) {
						lagging = fmt.Sprintf("%s/%d (leader %d, %d of %d replicas in sync)", *t.Topic, p.Partition, p.Leader, len(p.ISR), len(p.Replicas))
					}
				}
			}
		} else {
			lagging = err.Error()
		}
		if lagging == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: partitions not in sync: %s: %w", lagging, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
