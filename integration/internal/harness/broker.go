package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/txoutbox/txoutbox/internal/kafkatest"
)

// BrokerConfig describes the broker process of a scenario.
type BrokerConfig struct {
	// Topics are created at the first start, with Partitions each.
	Topics     []string
	Partitions int
	// NoAutoCreate makes the broker refuse produces to any other topic.
	NoAutoCreate bool
	// MaxMessageBytes is the broker's message.max.bytes (0: kfake's
	// default, 1048588).
	MaxMessageBytes int
	// Proxy puts a harness Proxy in front of the broker, and makes the
	// broker advertise the proxy's address, so every client (relays and
	// verifier alike) reaches the broker through it: a partition between
	// the relays and the broker.
	Proxy bool
	// Control starts the broker with its fault-control endpoint, for
	// HoldProduce (a slow broker).
	Control bool
}

// Broker is a kfakeproc child process on a fixed loopback port with a data
// directory, so it can be stopped and started again with what it
// acknowledged intact, as a real broker restart.
type Broker struct {
	env     *Env
	cfg     BrokerConfig
	port    int
	dir     string
	proc    *kafkatest.Proc // nil while stopped
	proxy   *Proxy          // nil unless cfg.Proxy
	control string          // the control endpoint's address, once started
	real    *realCluster    // the real cluster instead of a kfakeproc (Env.Kafka)
}

// StartBroker picks a free loopback port and starts the broker on it; or,
// with Env.Kafka, takes the real cluster, with the scenario's topics made
// anew.
func StartBroker(ctx context.Context, env *Env, cfg BrokerConfig) (*Broker, error) {
	if cfg.Partitions == 0 {
		cfg.Partitions = 8
	}
	if env.Kafka != nil {
		c, err := startRealCluster(ctx, env, cfg)
		if err != nil {
			return nil, err
		}
		return &Broker{env: env, cfg: cfg, real: c}, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pick a broker port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	b := &Broker{env: env, cfg: cfg, port: port, dir: filepath.Join(env.Dir, "broker-data")}
	if cfg.Proxy {
		if b.proxy, err = NewProxy("127.0.0.1:" + strconv.Itoa(port)); err != nil {
			return nil, err
		}
	}
	if err := b.Start(ctx); err != nil {
		b.proxy.close()
		return nil, err
	}
	return b, nil
}

// Addr is the address clients dial: the broker's, or its proxy's with
// BrokerConfig.Proxy; on the real cluster a comma-separated list, one per
// node. It does not change across restarts.
func (b *Broker) Addr() string {
	if b.real != nil {
		return b.real.addr()
	}
	if b.proxy != nil {
		return b.proxy.Addr()
	}
	return "127.0.0.1:" + strconv.Itoa(b.port)
}

// Name is the broker's kind for the result line: BrokerKfake or
// BrokerKafka.
func (b *Broker) Name() string {
	if b.real != nil {
		return BrokerKafka
	}
	return BrokerKfake
}

// Partitioner is a network path a scenario can cut: the proxy in front of
// the broker (every node's, on the real cluster) or of PostgreSQL.
type Partitioner interface {
	Freeze()
	Thaw()
	Drop()
	Conns() int
}

// Proxy is the proxy in front of the broker (nil without
// BrokerConfig.Proxy).
func (b *Broker) Proxy() Partitioner {
	switch {
	case b.real != nil && b.real.proxies != nil:
		return b.real.proxies
	case b.proxy != nil:
		return b.proxy
	}
	return nil
}

// HoldProduce makes the broker hold every produce request arriving in the
// next window for hold before answering it (and storing its records as
// usual). It needs BrokerConfig.Control.
func (b *Broker) HoldProduce(ctx context.Context, window, hold time.Duration) error {
	if b.real != nil {
		return b.real.holdProduce(ctx, window, hold)
	}
	if b.control == "" {
		return errors.New("broker: started without BrokerConfig.Control")
	}
	u := fmt.Sprintf("http://%s/hold-produce?window=%s&for=%s", b.control, window, hold)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("broker control: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("broker control: %s: %s", resp.Status, msg)
	}
	return nil
}

// Start starts the broker process and waits until it listens.
func (b *Broker) Start(ctx context.Context) error {
	if b.real != nil {
		return b.real.start(ctx)
	}
	if b.proc != nil {
		return errors.New("broker: already running")
	}
	args := []string{
		"-port", strconv.Itoa(b.port),
		"-dir", b.dir,
		"-topics", strings.Join(b.cfg.Topics, ","),
		"-partitions", strconv.Itoa(b.cfg.Partitions),
		"-auto-create=" + strconv.FormatBool(!b.cfg.NoAutoCreate),
		"-max-message-bytes", strconv.Itoa(b.cfg.MaxMessageBytes),
	}
	if b.proxy != nil {
		args = append(args, "-advertise", b.proxy.Addr())
	}
	if b.cfg.Control {
		args = append(args, "-control-addr", "127.0.0.1:0")
	}
	logf, err := b.env.logFile("broker.log")
	if err != nil {
		return err
	}
	defer logf.Close()
	// The port was just released by the previous process or by the probe
	// listener; retry briefly in case the kernel has not let go of it.
	var lastErr error
	for attempt := 0; attempt < 20; attempt++ {
		if lastErr = b.start(ctx, args, logf); lastErr == nil {
			return nil
		}
		if !sleep(ctx, 250*time.Millisecond) {
			break
		}
	}
	return fmt.Errorf("start broker on %s: %w", b.Addr(), lastErr)
}

func (b *Broker) start(ctx context.Context, args []string, logf *os.File) error {
	p, err := kafkatest.StartProc(ctx, b.env.Bin.Broker, args, logf)
	if err != nil {
		return fmt.Errorf("%w (see broker.log)", err)
	}
	b.proc, b.control = p, p.Control
	return nil
}

// Stop stops the broker with SIGTERM, so it flushes its data directory, and
// waits for it to exit.
func (b *Broker) Stop() error {
	if b.real != nil {
		return b.real.stop()
	}
	if b.proc == nil {
		return nil
	}
	err := b.proc.Stop(15 * time.Second)
	b.proc = nil
	return err
}

// HeldProduce is how many produce requests the broker held (HoldProduce)
// since it last started: proof that the slow-broker fault hit publishes.
func (b *Broker) HeldProduce(ctx context.Context) (int, error) {
	if b.real != nil {
		return b.real.heldProduce(), nil
	}
	if b.control == "" {
		return 0, errors.New("broker: started without BrokerConfig.Control")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.control+"/stats", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("broker control: %w", err)
	}
	defer resp.Body.Close()
	var n int
	if _, err := fmt.Fscanf(resp.Body, "held_produce=%d", &n); err != nil {
		return 0, fmt.Errorf("broker control stats: %w", err)
	}
	return n, nil
}

// Settle ends the faults still running on the real cluster (a paused
// node is resumed now, not when its timer fires) and waits until every
// partition of topics is in sync again, so the verifier reads each
// partition to the end of what was acknowledged. kfake needs nothing.
func (b *Broker) Settle(ctx context.Context, topics []string) error {
	if b.real == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := b.real.ensureRunning(ctx); err != nil {
		return err
	}
	return kafkatest.WaitInSync(ctx, b.real.brokers, topics)
}

// Close stops the broker and its proxy; the real cluster is left whole
// for the next scenario.
func (b *Broker) Close() error {
	if b.real != nil {
		return b.real.close()
	}
	err := b.Stop()
	b.proxy.close()
	return err
}
